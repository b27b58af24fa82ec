"""The typed rows that pass between stages (``contracts.typed_rows``): the plan's rows here
(``contracts.plan_row``), beside their producers the compaction job's stage 1 rows
(``compaction.pipeline.batch_plans.PartitionPlan``) and segment group results
(``compaction.cleaning.results.GroupResult``)."""
