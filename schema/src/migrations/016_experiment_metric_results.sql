CREATE VIEW IF NOT EXISTS {db}.experiment_metric_results{on_cluster} AS
{metric_results_select_16}
