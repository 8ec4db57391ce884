CREATE VIEW IF NOT EXISTS {db}.experiment_results{on_cluster} AS
{results_statistics_16}
