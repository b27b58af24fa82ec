"""One partition cleaned, without Spark: its batch plans read from the files, the offset map, the
rewrite of its segment groups, and what a group's task reports."""
