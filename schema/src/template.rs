//! Named placeholders in SQL: `{name}` is replaced by the parameter `name`, looked up by
//! name, never by position. A parameter is either text, put in as it is (a database name,
//! a filter), or SQL, itself rendered with the same parameters (a fragment shared by
//! several views). A placeholder that no parameter fills is an error, so a template and
//! the code that fills it cannot drift apart unnoticed: every statement is rendered for
//! every profile in the tests.
//!
//! A placeholder is `{` then a letter or `_`, then letters, digits or `_`, then `}`
//! (`x{3}` in a regular expression stays as it is). Anything else between
//! braces (ClickHouse's query parameters `{name:Type}`) is left as it is; ClickHouse's
//! own macros (`{shard}`, `{replica}`) are parameters whose text is themselves.

use std::fmt;

/// A parameter's value.
#[derive(Clone, Debug)]
pub(crate) enum Value {
    /// Put in as it is.
    Text(String),
    /// Rendered with the same parameters, then put in.
    Sql(String),
    /// Rendered with these parameters over the same ones: a fragment put in several
    /// times with a parameter of its own (a column prefix, an arm).
    Scoped(String, Vec<(&'static str, Value)>),
}

/// The parameters of a rendering: a scope of its own over an optional outer one, so a
/// fragment rendered several times (per prefix, per arm) adds only what differs.
#[derive(Clone, Debug, Default)]
pub(crate) struct Params<'a> {
    values: Vec<(&'static str, Value)>,
    outer: Option<&'a Params<'a>>,
}

impl<'a> Params<'a> {
    pub fn new() -> Self {
        Self::default()
    }

    /// An inner scope: its parameters first, then this one's.
    pub fn scope(&'a self) -> Params<'a> {
        Params {
            values: Vec::new(),
            outer: Some(self),
        }
    }

    pub fn text(mut self, name: &'static str, value: impl Into<String>) -> Self {
        self.values.push((name, Value::Text(value.into())));
        self
    }

    pub fn sql(mut self, name: &'static str, value: impl Into<String>) -> Self {
        self.values.push((name, Value::Sql(value.into())));
        self
    }

    /// These parameters added.
    pub fn with(mut self, values: Vec<(&'static str, Value)>) -> Self {
        self.values.extend(values);
        self
    }

    fn get(&self, name: &str) -> Option<&Value> {
        self.values
            .iter()
            .rev()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| v)
            .or_else(|| self.outer.and_then(|o| o.get(name)))
    }

    /// `template` with every placeholder filled; panics on one that nothing fills (the
    /// templates are the crate's own, and the tests render every one).
    pub fn render(&self, template: &str) -> String {
        self.try_render(template, 0)
            .unwrap_or_else(|e| panic!("{e} in:\n{template}"))
    }

    fn try_render(&self, template: &str, depth: usize) -> Result<String, Unfilled> {
        if depth > 32 {
            return Err(Unfilled("a parameter that contains itself".to_owned()));
        }
        let mut out = String::with_capacity(template.len());
        let mut rest = template;
        while let Some(start) = rest.find('{') {
            out.push_str(&rest[..start]);
            let after = &rest[start + 1..];
            let name_len = after
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .unwrap_or(after.len());
            let starts_as_name = after.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_');
            if !starts_as_name || !after[name_len..].starts_with('}') {
                out.push('{');
                rest = after;
                continue;
            }
            let name = &after[..name_len];
            match self.get(name) {
                Some(Value::Text(text)) => out.push_str(text),
                Some(Value::Sql(sql)) => out.push_str(&self.try_render(sql, depth + 1)?),
                Some(Value::Scoped(sql, values)) => {
                    let scope = Params {
                        values: values.clone(),
                        outer: Some(self),
                    };
                    out.push_str(&scope.try_render(sql, depth + 1)?);
                }
                None => return Err(Unfilled(name.to_owned())),
            }
            rest = &after[name_len + 1..];
        }
        out.push_str(rest);
        Ok(out)
    }
}

/// A placeholder that no parameter fills.
#[derive(Debug)]
struct Unfilled(String);

impl fmt::Display for Unfilled {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "no parameter fills {{{}}}", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholders_are_filled_by_name_and_sql_is_rendered_in_place() {
        let outer = Params::new()
            .text("db", "analytics")
            .sql("counts", "{db}.counts{by}");
        let inner = outer.scope().text("by", "_by_hour");
        assert_eq!(
            inner.render("SELECT {x:String}, '{}', match(s, 'a{3}') FROM {counts}"),
            "SELECT {x:String}, '{}', match(s, 'a{3}') FROM analytics.counts_by_hour"
        );
        // A scoped fragment sees its own parameters over the others.
        let scoped = outer.scope().with(vec![(
            "p",
            Value::Scoped("{db}.{x}".into(), vec![("x", Value::Text("t".into()))]),
        )]);
        assert_eq!(scoped.render("{p}"), "analytics.t");
        // Text is never rendered: a filter holding braces stays as given.
        let text = Params::new().text("filter", "x = '{db}'");
        assert_eq!(text.render("WHERE {filter}"), "WHERE x = '{db}'");
    }

    #[test]
    #[should_panic(expected = "no parameter fills {missing}")]
    fn a_placeholder_nothing_fills_is_an_error() {
        Params::new().text("db", "a").render("{db}.{missing}");
    }

    #[test]
    #[should_panic(expected = "contains itself")]
    fn a_parameter_that_contains_itself_is_an_error() {
        Params::new().sql("a", "({a})").render("{a}");
    }
}
