//! The events part of a metric definition (the metric itself, or a ratio's numerator or
//! denominator): which of a visitor's events count and how they make one number, and the
//! rules of its aggregate and field.

use super::fields::Fields;

/// How a visitor's matching events make one number.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Aggregate {
    Count,
    Sum,
    Max,
    Mean,
    /// Distinct sessions of the visitor's matching events (a ratio's only).
    Sessions,
}

impl Aggregate {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Count => "count",
            Self::Sum => "sum",
            Self::Max => "max",
            Self::Mean => "mean",
            Self::Sessions => "sessions",
        }
    }

    /// Whether it reads a field's values (rather than counting events or sessions).
    pub fn needs_field(self) -> bool {
        matches!(self, Self::Sum | Self::Max | Self::Mean)
    }

    fn parse(name: &str) -> Option<Self> {
        [
            Self::Count,
            Self::Sum,
            Self::Max,
            Self::Mean,
            Self::Sessions,
        ]
        .into_iter()
        .find(|a| a.as_str() == name)
    }
}

/// A numeric field of the event contract.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Field {
    TimeOnPage,
    ScrollDepth,
    LoadTime,
}

impl Field {
    /// The name in the event contract (and the snapshot).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::TimeOnPage => "timeOnPage",
            Self::ScrollDepth => "scrollDepth",
            Self::LoadTime => "loadTime",
        }
    }

    fn parse(name: &str) -> Option<Self> {
        [Self::TimeOnPage, Self::ScrollDepth, Self::LoadTime]
            .into_iter()
            .find(|f| f.as_str() == name)
    }
}

/// Which events count and how they make one number per visitor.
#[derive(Clone, Debug, PartialEq)]
pub struct Events {
    /// `None`: any event name.
    pub event_name: Option<String>,
    /// `None`: any click target.
    pub click_target: Option<String>,
    /// Only conversions (an event named `conversion` or one with `conversion: true`).
    pub conversion: bool,
    pub field: Option<Field>,
    /// `None`: a proportion's (whether any event matched).
    pub aggregate: Option<Aggregate>,
}

/// The events part of a definition: the metric itself or a ratio's numerator or
/// denominator.
pub(super) fn events(fields: &Fields<'_>, problems: &mut Vec<String>) -> Events {
    let (place, prefix) = (&fields.place, fields.prefix);
    let event_name = fields.string("eventName", problems);
    let click_target = fields.string("clickTarget", problems);
    let conversion = fields.boolean("conversion", problems);
    let field = fields
        .string("field", problems)
        .and_then(|name| match Field::parse(name) {
            Some(field) => Some(field),
            None => {
                problems.push(format!(
                    "{place}: {prefix}field must be timeOnPage, scrollDepth or loadTime, \
                     not {name:?}"
                ));
                None
            }
        });
    let aggregate =
        fields
            .string("aggregate", problems)
            .and_then(|name| match Aggregate::parse(name) {
                Some(aggregate) => Some(aggregate),
                None => {
                    problems.push(format!(
                        "{place}: {prefix}aggregate must be count, sum, max, mean or sessions, \
                     not {name:?}"
                    ));
                    None
                }
            });
    Events {
        event_name: event_name.map(str::to_owned),
        click_target: click_target.map(str::to_owned),
        conversion,
        field,
        aggregate,
    }
}

/// The rules of an aggregate and its field: one of `allowed` is required; `count` and
/// `sessions` take no field, the others need one.
pub(super) fn check_aggregate(
    fields: &Fields<'_>,
    events: &Events,
    allowed: &[Aggregate],
    problems: &mut Vec<String>,
) {
    let (place, prefix) = (&fields.place, fields.prefix);
    let names = allowed
        .iter()
        .map(|a| a.as_str())
        .collect::<Vec<_>>()
        .join(", ");
    if !fields.has("aggregate") {
        problems.push(format!("{place}: {prefix}aggregate is required ({names})"));
        return;
    }
    let Some(aggregate) = events.aggregate else {
        return;
    };
    if !allowed.contains(&aggregate) {
        problems.push(format!(
            "{place}: {prefix}aggregate {} is not allowed here ({names})",
            aggregate.as_str()
        ));
    } else if aggregate.needs_field() {
        if !fields.has("field") {
            problems.push(format!(
                "{place}: {prefix}field is required with aggregate {} (timeOnPage, \
                 scrollDepth or loadTime)",
                aggregate.as_str()
            ));
        }
    } else {
        fields.refuse(
            "field",
            &format!("is not allowed with aggregate {}", aggregate.as_str()),
            problems,
        );
    }
}
