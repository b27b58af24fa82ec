"""What a Kafka log dir holds, read through ``storage``: partitions and their segments
(``listing``), the commit-record view of an object-store partition (``commits``), topic
configuration from KRaft's metadata log (``kraft``), and byte ranges of segments for tasks
(``splits``). Nothing here writes."""
