CREATE VIEW IF NOT EXISTS {db}.experiment_results_over_time{on_cluster} AS
{results_statistics_16_by_hour}
