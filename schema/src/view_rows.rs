//! A row of each results view, declared once: `experiment_results`,
//! `experiment_results_over_time` and `experiment_metric_results`. The command, the report
//! and the tests read the views with these types (`SELECT ?fields FROM …`), and
//! `e2e/tests/storage/view_rows.rs` compares each type's [`COLUMNS`](ResultsRow::COLUMNS)
//! with the view's columns on ClickHouse 18.16 and on a modern server. A column added to a
//! view is added here, or that test fails.

use clickhouse::Row;
use serde::Deserialize;

/// Declares a view's row: the struct, its view's name and its columns with their
/// ClickHouse types (as 18.16 names them), in the view's order.
macro_rules! view_row {
    ($(#[$meta:meta])* $name:ident = $view:literal {
        $($(#[$field_meta:meta])* $field:ident: $ty:ty = $ch:literal,)*
    }) => {
        $(#[$meta])*
        #[derive(Clone, Debug, Default, PartialEq, Deserialize, Row)]
        pub struct $name {
            $($(#[$field_meta])* pub $field: $ty,)*
        }

        impl $name {
            /// The view this is a row of.
            pub const VIEW: &str = $view;
            /// The view's columns, in its order: name and ClickHouse type.
            pub const COLUMNS: &[(&str, &str)] = &[$((stringify!($field), $ch),)*];
        }
    };
}

view_row! {
    /// A variant of an experiment in a phase, as of the view's `as_of`: its visitors,
    /// conversions and the tests against the control (none on the control's row).
    ResultsRow = "experiment_results" {
        public_key: String = "LowCardinality(String)",
        experiment_id: String = "LowCardinality(String)",
        phase: u32 = "UInt32",
        variant_id: String = "String",
        is_control: u8 = "UInt8",
        exposed: u64 = "UInt64",
        converted: u64 = "UInt64",
        conversion_rate: f64 = "Float64",
        diff: Option<f64> = "Nullable(Float64)",
        ci_low: Option<f64> = "Nullable(Float64)",
        ci_high: Option<f64> = "Nullable(Float64)",
        p_value: Option<f64> = "Nullable(Float64)",
        srm_p_value: Option<f64> = "Nullable(Float64)",
        always_valid_p_value: Option<f64> = "Nullable(Float64)",
        always_valid_ci_low: Option<f64> = "Nullable(Float64)",
        always_valid_ci_high: Option<f64> = "Nullable(Float64)",
        /// Why the view gives no statistic ('' where it gives them).
        no_test_reason: String = "String",
        mature_visitors: u64 = "UInt64",
        mature_converted: u64 = "UInt64",
        mature_conversion_rate: Option<f64> = "Nullable(Float64)",
        mature_diff: Option<f64> = "Nullable(Float64)",
        mature_ci_low: Option<f64> = "Nullable(Float64)",
        mature_ci_high: Option<f64> = "Nullable(Float64)",
        mature_p_value: Option<f64> = "Nullable(Float64)",
        mature_always_valid_p_value: Option<f64> = "Nullable(Float64)",
        mature_always_valid_ci_low: Option<f64> = "Nullable(Float64)",
        mature_always_valid_ci_high: Option<f64> = "Nullable(Float64)",
        mature_no_test_reason: String = "String",
        sequential_tuning: f64 = "Float64",
        treatments: u64 = "UInt64",
        /// The lift, rate / the control's rate − 1, with its delta-method intervals.
        lift: Option<f64> = "Nullable(Float64)",
        lift_ci_low: Option<f64> = "Nullable(Float64)",
        lift_ci_high: Option<f64> = "Nullable(Float64)",
        always_valid_lift_ci_low: Option<f64> = "Nullable(Float64)",
        always_valid_lift_ci_high: Option<f64> = "Nullable(Float64)",
        /// The time up to which the events counted were stored (seconds, UTC).
        as_of: u32 = "DateTime('UTC')",
    }
}

view_row! {
    /// A variant in an hour: the figures of [`ResultsRow`] over the visitors first exposed
    /// up to the end of that hour.
    ResultsOverTimeRow = "experiment_results_over_time" {
        public_key: String = "LowCardinality(String)",
        experiment_id: String = "LowCardinality(String)",
        phase: u32 = "UInt32",
        /// Days since the Unix epoch.
        day: u16 = "Date",
        /// The start of the hour, seconds since the Unix epoch (UTC).
        hour: u32 = "DateTime('UTC')",
        variant_id: String = "String",
        is_control: u8 = "UInt8",
        exposed: u64 = "UInt64",
        converted: u64 = "UInt64",
        conversion_rate: f64 = "Float64",
        diff: Option<f64> = "Nullable(Float64)",
        ci_low: Option<f64> = "Nullable(Float64)",
        ci_high: Option<f64> = "Nullable(Float64)",
        p_value: Option<f64> = "Nullable(Float64)",
        srm_p_value: Option<f64> = "Nullable(Float64)",
        always_valid_p_value: Option<f64> = "Nullable(Float64)",
        always_valid_ci_low: Option<f64> = "Nullable(Float64)",
        always_valid_ci_high: Option<f64> = "Nullable(Float64)",
        no_test_reason: String = "String",
        mature_visitors: u64 = "UInt64",
        mature_converted: u64 = "UInt64",
        mature_conversion_rate: Option<f64> = "Nullable(Float64)",
        mature_diff: Option<f64> = "Nullable(Float64)",
        mature_ci_low: Option<f64> = "Nullable(Float64)",
        mature_ci_high: Option<f64> = "Nullable(Float64)",
        mature_p_value: Option<f64> = "Nullable(Float64)",
        mature_always_valid_p_value: Option<f64> = "Nullable(Float64)",
        mature_always_valid_ci_low: Option<f64> = "Nullable(Float64)",
        mature_always_valid_ci_high: Option<f64> = "Nullable(Float64)",
        mature_no_test_reason: String = "String",
        sequential_tuning: f64 = "Float64",
        treatments: u64 = "UInt64",
        lift: Option<f64> = "Nullable(Float64)",
        lift_ci_low: Option<f64> = "Nullable(Float64)",
        lift_ci_high: Option<f64> = "Nullable(Float64)",
        always_valid_lift_ci_low: Option<f64> = "Nullable(Float64)",
        always_valid_lift_ci_high: Option<f64> = "Nullable(Float64)",
        as_of: u32 = "DateTime('UTC')",
    }
}

view_row! {
    /// A variant on a metric of an experiment in a phase: its value, the test against
    /// the control, with and without CUPED.
    MetricResultsRow = "experiment_metric_results" {
        public_key: String = "String",
        experiment_id: String = "String",
        phase: u32 = "UInt32",
        metric_id: String = "String",
        role: String = "String",
        position: u32 = "UInt32",
        kind: String = "String",
        higher_is_better: u8 = "UInt8",
        variant_id: String = "String",
        is_control: u8 = "UInt8",
        visitors: u64 = "UInt64",
        value: f64 = "Float64",
        diff: Option<f64> = "Nullable(Float64)",
        ci_low: Option<f64> = "Nullable(Float64)",
        ci_high: Option<f64> = "Nullable(Float64)",
        p_value: Option<f64> = "Nullable(Float64)",
        always_valid_p_value: Option<f64> = "Nullable(Float64)",
        always_valid_ci_low: Option<f64> = "Nullable(Float64)",
        always_valid_ci_high: Option<f64> = "Nullable(Float64)",
        chance_to_beat_control: Option<f64> = "Nullable(Float64)",
        always_valid_harm_p_value: Option<f64> = "Nullable(Float64)",
        cuped_theta: Option<f64> = "Nullable(Float64)",
        cuped_history_theta: Option<f64> = "Nullable(Float64)",
        cuped_diff: Option<f64> = "Nullable(Float64)",
        cuped_ci_low: Option<f64> = "Nullable(Float64)",
        cuped_ci_high: Option<f64> = "Nullable(Float64)",
        cuped_p_value: Option<f64> = "Nullable(Float64)",
        cuped_always_valid_p_value: Option<f64> = "Nullable(Float64)",
        cuped_always_valid_ci_low: Option<f64> = "Nullable(Float64)",
        cuped_always_valid_ci_high: Option<f64> = "Nullable(Float64)",
        cuped_variance_reduction: Option<f64> = "Nullable(Float64)",
        cap: f64 = "Float64",
        sequential_tuning: f64 = "Float64",
        treatments: u64 = "UInt64",
        no_test_reason: String = "String",
        /// The experiment's secondary metrics: how many the correction counts.
        secondary_metrics: u64 = "UInt64",
        /// `p_value` corrected for the number of secondary metrics (Bonferroni) on a
        /// secondary metric's row, as it is on the goal's and the guardrails'.
        adjusted_p_value: Option<f64> = "Nullable(Float64)",
        adjusted_always_valid_p_value: Option<f64> = "Nullable(Float64)",
        as_of: u32 = "DateTime('UTC')",
    }
}

/// Every view's name and columns, for the test that compares them with the server's.
pub const VIEWS: [(&str, &[(&str, &str)]); 3] = [
    (ResultsRow::VIEW, ResultsRow::COLUMNS),
    (ResultsOverTimeRow::VIEW, ResultsOverTimeRow::COLUMNS),
    (MetricResultsRow::VIEW, MetricResultsRow::COLUMNS),
];
