//! The messages' JSON, byte for byte what `serde_json::to_writer` writes, faster on the
//! texts: serde_json looks every byte of a string up in its escape table (16% of the
//! ingest's instructions under load, callgrind); here a string with nothing to escape (no
//! control character, `"` or `\`: every text the body's JSON did not escape) is checked
//! in one pass the compiler vectorizes and copied whole. Flat structs of numbers,
//! booleans, options and strings are written here; anything else (sequences, maps,
//! enums' data) is refused and the whole value written by serde_json instead.

use std::fmt;

use serde::Serialize;
use serde::ser::{self, Impossible, SerializeStruct};

/// Appends `value`'s JSON to `out`, as `serde_json::to_writer` would.
pub fn write<T: Serialize + ?Sized>(out: &mut Vec<u8>, value: &T) -> serde_json::Result<()> {
    let start = out.len();
    if value.serialize(&mut Writer { out: &mut *out }).is_ok() {
        return Ok(());
    }
    out.truncate(start);
    serde_json::to_writer(out, value)
}

/// What this writer leaves to serde_json.
#[derive(Debug)]
pub struct Unsupported;

impl fmt::Display for Unsupported {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("left to serde_json")
    }
}

impl std::error::Error for Unsupported {}

impl ser::Error for Unsupported {
    fn custom<T: fmt::Display>(_: T) -> Self {
        Self
    }
}

struct Writer<'a> {
    out: &'a mut Vec<u8>,
}

impl Writer<'_> {
    /// A leaf value as serde_json writes it (numbers: itoa and ryu, non-finite floats null).
    fn leaf<T: Serialize>(&mut self, value: T) -> Result<(), Unsupported> {
        serde_json::to_writer(&mut *self.out, &value).map_err(|_| Unsupported)
    }

    fn string(&mut self, s: &str) -> Result<(), Unsupported> {
        if needs_escape(s.as_bytes()) {
            return self.leaf(s);
        }
        self.out.reserve(s.len() + 2);
        self.out.push(b'"');
        self.out.extend_from_slice(s.as_bytes());
        self.out.push(b'"');
        Ok(())
    }
}

/// A control character, `"` or `\`: what serde_json escapes. Eight bytes at a time:
/// a byte below 0x20, or equal to `"` or `\` once xored with it, sets its high bit.
fn needs_escape(bytes: &[u8]) -> bool {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    let below = |x: u64, n: u8| x.wrapping_sub(ONES * u64::from(n)) & !x & HIGH;
    let mut chunks = bytes.chunks_exact(8);
    for chunk in &mut chunks {
        let mut word = [0; 8];
        word.copy_from_slice(chunk);
        let x = u64::from_le_bytes(word);
        if below(x, 0x20)
            | below(x ^ (ONES * u64::from(b'"')), 1)
            | below(x ^ (ONES * u64::from(b'\\')), 1)
            != 0
        {
            return true;
        }
    }
    chunks
        .remainder()
        .iter()
        .any(|&b| b < 0x20 || b == b'"' || b == b'\\')
}

type Refused = Impossible<(), Unsupported>;

impl<'a, 'b> ser::Serializer for &'a mut Writer<'b> {
    type Ok = ();
    type Error = Unsupported;
    type SerializeSeq = Refused;
    type SerializeTuple = Refused;
    type SerializeTupleStruct = Refused;
    type SerializeTupleVariant = Refused;
    type SerializeMap = Refused;
    type SerializeStruct = Struct<'a, 'b>;
    type SerializeStructVariant = Refused;

    fn serialize_bool(self, v: bool) -> Result<(), Unsupported> {
        self.out
            .extend_from_slice(if v { b"true" } else { b"false" });
        Ok(())
    }
    fn serialize_i8(self, v: i8) -> Result<(), Unsupported> {
        self.leaf(v)
    }
    fn serialize_i16(self, v: i16) -> Result<(), Unsupported> {
        self.leaf(v)
    }
    fn serialize_i32(self, v: i32) -> Result<(), Unsupported> {
        self.leaf(v)
    }
    fn serialize_i64(self, v: i64) -> Result<(), Unsupported> {
        self.leaf(v)
    }
    fn serialize_u8(self, v: u8) -> Result<(), Unsupported> {
        self.leaf(v)
    }
    fn serialize_u16(self, v: u16) -> Result<(), Unsupported> {
        self.leaf(v)
    }
    fn serialize_u32(self, v: u32) -> Result<(), Unsupported> {
        self.leaf(v)
    }
    fn serialize_u64(self, v: u64) -> Result<(), Unsupported> {
        self.leaf(v)
    }
    fn serialize_f32(self, v: f32) -> Result<(), Unsupported> {
        self.leaf(v)
    }
    fn serialize_f64(self, v: f64) -> Result<(), Unsupported> {
        self.leaf(v)
    }
    fn serialize_char(self, v: char) -> Result<(), Unsupported> {
        self.leaf(v)
    }
    fn serialize_str(self, v: &str) -> Result<(), Unsupported> {
        self.string(v)
    }
    fn serialize_bytes(self, _: &[u8]) -> Result<(), Unsupported> {
        Err(Unsupported)
    }
    fn serialize_none(self) -> Result<(), Unsupported> {
        self.out.extend_from_slice(b"null");
        Ok(())
    }
    fn serialize_some<T: Serialize + ?Sized>(self, value: &T) -> Result<(), Unsupported> {
        value.serialize(self)
    }
    fn serialize_unit(self) -> Result<(), Unsupported> {
        self.serialize_none()
    }
    fn serialize_unit_struct(self, _: &'static str) -> Result<(), Unsupported> {
        self.serialize_none()
    }
    fn serialize_unit_variant(
        self,
        _: &'static str,
        _: u32,
        variant: &'static str,
    ) -> Result<(), Unsupported> {
        self.string(variant)
    }
    fn serialize_newtype_struct<T: Serialize + ?Sized>(
        self,
        _: &'static str,
        value: &T,
    ) -> Result<(), Unsupported> {
        value.serialize(self)
    }
    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: &T,
    ) -> Result<(), Unsupported> {
        Err(Unsupported)
    }
    fn serialize_seq(self, _: Option<usize>) -> Result<Refused, Unsupported> {
        Err(Unsupported)
    }
    fn serialize_tuple(self, _: usize) -> Result<Refused, Unsupported> {
        Err(Unsupported)
    }
    fn serialize_tuple_struct(self, _: &'static str, _: usize) -> Result<Refused, Unsupported> {
        Err(Unsupported)
    }
    fn serialize_tuple_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: usize,
    ) -> Result<Refused, Unsupported> {
        Err(Unsupported)
    }
    fn serialize_map(self, _: Option<usize>) -> Result<Refused, Unsupported> {
        Err(Unsupported)
    }
    fn serialize_struct(self, _: &'static str, _: usize) -> Result<Struct<'a, 'b>, Unsupported> {
        self.out.push(b'{');
        Ok(Struct {
            writer: self,
            first: true,
        })
    }
    fn serialize_struct_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: usize,
    ) -> Result<Refused, Unsupported> {
        Err(Unsupported)
    }
}

pub struct Struct<'a, 'b> {
    writer: &'a mut Writer<'b>,
    first: bool,
}

impl SerializeStruct for Struct<'_, '_> {
    type Ok = ();
    type Error = Unsupported;

    fn serialize_field<T: Serialize + ?Sized>(
        &mut self,
        key: &'static str,
        value: &T,
    ) -> Result<(), Unsupported> {
        if !self.first {
            self.writer.out.push(b',');
        }
        self.first = false;
        self.writer.string(key)?;
        self.writer.out.push(b':');
        value.serialize(&mut *self.writer)
    }

    fn end(self) -> Result<(), Unsupported> {
        self.writer.out.push(b'}');
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::borrow::Cow;
    use std::collections::BTreeMap;

    use contract::event::{Envelope, EventMessage};

    use super::*;

    fn same_as_serde_json<T: Serialize + ?Sized>(value: &T) {
        let mut ours = b"before ".to_vec();
        write(&mut ours, value).unwrap();
        let mut theirs = b"before ".to_vec();
        serde_json::to_writer(&mut theirs, value).unwrap();
        assert_eq!(
            String::from_utf8_lossy(&ours),
            String::from_utf8_lossy(&theirs)
        );
    }

    #[test]
    fn strings_are_escaped_as_serde_json_does() {
        for c in (0u32..0x250).chain([0x2028, 0x2029, 0xfeff, 0x1f600]) {
            let c = char::from_u32(c).unwrap();
            same_as_serde_json(&format!("a{c}b"));
            same_as_serde_json(&format!("{c}"));
        }
        // Every ASCII byte at every place of a text longer than two words.
        for b in 0u8..0x80 {
            for at in 0..20 {
                let mut text = vec![b'x'; 20];
                text[at] = b;
                let text = String::from_utf8(text).unwrap();
                let escaped = serde_json::to_string(&text).unwrap().len() > text.len() + 2;
                assert_eq!(needs_escape(text.as_bytes()), escaped, "{b:#x} at {at}");
                same_as_serde_json(&text);
            }
        }
        same_as_serde_json("");
        same_as_serde_json("a long text without anything to escape, longer than a vector");
        same_as_serde_json("a long text with one \" quote, longer than a vector, at last \\");
    }

    #[test]
    fn messages_are_written_as_serde_json_writes_them() {
        #[derive(Serialize)]
        struct Leaves {
            a: u8,
            b: i64,
            c: f64,
            d: f64,
            e: Option<u32>,
            f: Option<bool>,
            g: (),
            #[serde(skip_serializing_if = "Option::is_none")]
            h: Option<i8>,
        }
        same_as_serde_json(&Leaves {
            a: 255,
            b: -12,
            c: 0.1 + 0.2,
            d: f64::NAN,
            e: None,
            f: Some(false),
            g: (),
            h: None,
        });
        let envelope = Envelope::new(
            1_700_000_000_123,
            "pk_test".into(),
            "Mozilla/5.0 \"quoted\" \\ (bot)".into(),
            Some(1_700_000_000_000.5),
        );
        for event in [
            r#"{"eventId":"7f1d8d62-6a1c-4c7e-9a6f-7f0c1b2d3e4f","eventName":"click","experimentId":"exp_1","sessionId":"s-1","variantId":"var_\u00e9","pathname":"/a\"b","referrer":"","clickTarget":"buy\n","scrollDepth":12.5,"timestamp":1700000000000}"#,
            r#"{"eventName":"impression","experimentId":"exp_1","sessionId":"s-2","pathname":"/ünïcode/😀","referrer":"https://x.example/?q=1&r=2"}"#,
        ] {
            let message: EventMessage<Cow<'_, str>> =
                EventMessage::from_client_json(event, &envelope).unwrap();
            same_as_serde_json(&message);
        }
    }

    #[test]
    fn what_it_does_not_write_is_left_to_serde_json() {
        #[derive(Serialize)]
        enum Kind {
            Pair(u8, u8),
        }
        #[derive(Serialize)]
        struct Nested {
            list: Vec<u8>,
            map: BTreeMap<String, u8>,
            kind: Kind,
        }
        same_as_serde_json(&Nested {
            list: vec![1, 2],
            map: BTreeMap::from([("k".into(), 1)]),
            kind: Kind::Pair(1, 2),
        });
        same_as_serde_json(&vec!["a", "b"]);
    }
}
