//! The protobuf form of the merged Swagger 2.0 document, which kube-openapi serves to
//! `Accept: application/com.github.proto-openapi.spec.v2@v1.0+protobuf` (client-go's
//! `OpenAPISchema()`, kubectl before 1.27, tools on kube-openapi's v2 client): gnostic's
//! `openapi.v2.Document` (`openapiv2/OpenAPIv2.proto` of github.com/google/gnostic-models),
//! built from the JSON document the way gnostic's compiler reads it.
//!
//! Each message is described once, as a table of which JSON key becomes which field as what
//! kind. Maps become gnostic's lists of `Named*` pairs (name 1, value 2) in key order, the
//! order upstream marshals its maps in; `x-` keys become `vendor_extension`; free-form values
//! (`default`, `enum`, `example`, extensions) become gnostic's `Any`, whose `yaml` is the
//! value's JSON text (JSON is YAML, and readers parse it as such). Keys gnostic's compiler
//! would refuse are left out (upstream's documents have none). Fields are written in field
//! number order and proto3 defaults are left out, as Go's `proto.Marshal` does.

use prost::encoding::{encode_key, encode_varint, WireType};
use serde_json::{Map, Value};

/// The media type kube-openapi answers with, for either spelling a client asks for.
pub const MEDIA_TYPE: &str = "application/com.github.proto-openapi.spec.v2.v1.0+protobuf";

/// `doc` (a Swagger 2.0 object) as a serialized `openapi.v2.Document`.
pub fn document(doc: &Value) -> Vec<u8> {
    let mut out = Vec::new();
    if let Value::Object(obj) = doc {
        message(&DOCUMENT, obj, &mut out);
    }
    out
}

/// How one JSON value becomes one field.
#[derive(Clone, Copy)]
enum Kind {
    Str,
    Bool,
    Double,
    Int64,
    /// `repeated string`.
    Strs,
    Msg(&'static Message),
    /// `repeated`: one message per element of an array.
    Msgs(&'static Message),
    /// gnostic's `Any { string yaml = 2; }`.
    Any,
    Anys,
    /// A message whose `repeated string = 1` holds a string or an array's strings
    /// (`TypeItem`, `StringArray`).
    StrList,
    /// `ItemsItem`: `repeated Schema = 1` from one schema or an array of them.
    SchemaList,
    /// `AdditionalPropertiesItem`: a schema (1) or a boolean (2).
    SchemaOrBool,
}

/// Chooses a oneof's member for an object: its field number and message.
type Pick = fn(&Map<String, Value>) -> Option<(u32, &'static Message)>;

enum Message {
    /// Fields by JSON key, in field number order; `x-` keys to `vendor_extension` at `ext`,
    /// the last field of every such message.
    Fields {
        fields: &'static [(&'static str, u32, Kind)],
        ext: Option<u32>,
    },
    /// A map: each key `keys` accepts as a `Named*` pair at `tag`; `x-` keys to `ext`.
    Map {
        tag: u32,
        value: Kind,
        keys: fn(&str) -> bool,
        ext: Option<u32>,
    },
    /// A oneof: the field and message the object's content selects, as gnostic's compiler
    /// tries its alternatives.
    OneOf(Pick),
}

fn message(m: &Message, obj: &Map<String, Value>, out: &mut Vec<u8>) {
    match m {
        Message::Fields { fields, ext } => {
            for (key, tag, kind) in *fields {
                if let Some(v) = obj.get(*key) {
                    field(*tag, *kind, v, out);
                }
            }
            if let Some(tag) = ext {
                extensions(*tag, obj, out);
            }
        }
        Message::Map {
            tag,
            value,
            keys,
            ext,
        } => {
            let ext_first = ext.is_some_and(|e| e < *tag);
            if let (true, Some(e)) = (ext_first, ext) {
                extensions(*e, obj, out);
            }
            for (k, v) in obj.iter().filter(|(k, _)| keys(k)) {
                nested(*tag, out, |buf| {
                    string(1, k, buf);
                    field(2, *value, v, buf);
                });
            }
            if let (false, Some(e)) = (ext_first, ext) {
                extensions(*e, obj, out);
            }
        }
        Message::OneOf(pick) => {
            if let Some((tag, inner)) = pick(obj) {
                nested(tag, out, |buf| message(inner, obj, buf));
            }
        }
    }
}

fn field(tag: u32, kind: Kind, v: &Value, out: &mut Vec<u8>) {
    match (kind, v) {
        (Kind::Str, Value::String(s)) => string(tag, s, out),
        (Kind::Bool, Value::Bool(true)) => prost::encoding::bool::encode(tag, &true, out),
        (Kind::Double, Value::Number(n)) => {
            if let Some(f) = n.as_f64().filter(|f| *f != 0.0) {
                prost::encoding::double::encode(tag, &f, out);
            }
        }
        (Kind::Int64, Value::Number(n)) => {
            if let Some(i) = n.as_i64().filter(|i| *i != 0) {
                prost::encoding::int64::encode(tag, &i, out);
            }
        }
        (Kind::Strs, Value::Array(items)) => {
            for s in items.iter().filter_map(Value::as_str) {
                repeated_string(tag, s, out);
            }
        }
        (Kind::Msg(m), Value::Object(obj)) => nested(tag, out, |buf| message(m, obj, buf)),
        (Kind::Msgs(m), Value::Array(items)) => {
            for obj in items.iter().filter_map(Value::as_object) {
                nested(tag, out, |buf| message(m, obj, buf));
            }
        }
        (Kind::Any, v) => nested(tag, out, |buf| string(2, &format!("{v}\n"), buf)),
        (Kind::Anys, Value::Array(items)) => {
            for v in items {
                field(tag, Kind::Any, v, out);
            }
        }
        (Kind::StrList, Value::String(s)) => nested(tag, out, |buf| repeated_string(1, s, buf)),
        (Kind::StrList, Value::Array(_)) => nested(tag, out, |buf| field(1, Kind::Strs, v, buf)),
        (Kind::SchemaList, Value::Object(_)) => nested(tag, out, |buf| {
            field(1, Kind::Msg(&SCHEMA), v, buf);
        }),
        (Kind::SchemaList, Value::Array(_)) => {
            nested(tag, out, |buf| field(1, Kind::Msgs(&SCHEMA), v, buf));
        }
        (Kind::SchemaOrBool, Value::Object(_)) => nested(tag, out, |buf| {
            field(1, Kind::Msg(&SCHEMA), v, buf);
        }),
        // A oneof member is written even when it is the default.
        (Kind::SchemaOrBool, Value::Bool(b)) => nested(tag, out, |buf| {
            prost::encoding::bool::encode(2, b, buf);
        }),
        _ => {}
    }
}

/// The `x-` keys of `obj` as `NamedAny` at `tag`.
fn extensions(tag: u32, obj: &Map<String, Value>, out: &mut Vec<u8>) {
    for (k, v) in obj.iter().filter(|(k, _)| k.starts_with("x-")) {
        nested(tag, out, |buf| {
            string(1, k, buf);
            field(2, Kind::Any, v, buf);
        });
    }
}

/// A `string` field; proto3 leaves the empty string out.
fn string(tag: u32, s: &str, out: &mut Vec<u8>) {
    if !s.is_empty() {
        repeated_string(tag, s, out);
    }
}

/// One element of a `repeated string`, written even when empty.
fn repeated_string(tag: u32, s: &str, out: &mut Vec<u8>) {
    encode_key(tag, WireType::LengthDelimited, out);
    encode_varint(s.len() as u64, out);
    out.extend_from_slice(s.as_bytes());
}

/// A length-delimited field holding what `write` writes.
fn nested(tag: u32, out: &mut Vec<u8>, write: impl FnOnce(&mut Vec<u8>)) {
    let mut buf = Vec::new();
    write(&mut buf);
    encode_key(tag, WireType::LengthDelimited, out);
    encode_varint(buf.len() as u64, out);
    out.extend_from_slice(&buf);
}

fn any_key(_: &str) -> bool {
    true
}

fn path_key(k: &str) -> bool {
    k.starts_with('/')
}

fn response_key(k: &str) -> bool {
    k == "default" || (k.len() == 3 && k.bytes().all(|b| b.is_ascii_digit()))
}

fn str_of<'a>(obj: &'a Map<String, Value>, key: &str) -> &'a str {
    obj.get(key).and_then(Value::as_str).unwrap_or_default()
}

/// gnostic tries the parameter first and the reference last; the last match wins, and a
/// reference matches whatever else the object holds.
fn parameters_item(obj: &Map<String, Value>) -> Option<(u32, &'static Message)> {
    Some(if obj.contains_key("$ref") {
        (2, &JSON_REFERENCE)
    } else {
        (1, &PARAMETER)
    })
}

fn parameter(obj: &Map<String, Value>) -> Option<(u32, &'static Message)> {
    match str_of(obj, "in") {
        "body" => Some((1, &BODY_PARAMETER)),
        "header" | "formData" | "query" | "path" => Some((2, &NON_BODY_PARAMETER)),
        _ => None,
    }
}

fn non_body_parameter(obj: &Map<String, Value>) -> Option<(u32, &'static Message)> {
    match str_of(obj, "in") {
        "header" => Some((1, &HEADER_OR_PATH_PARAMETER)),
        "formData" => Some((2, &QUERY_OR_FORM_PARAMETER)),
        "query" => Some((3, &QUERY_OR_FORM_PARAMETER)),
        "path" => Some((4, &HEADER_OR_PATH_PARAMETER)),
        _ => None,
    }
}

fn response_value(obj: &Map<String, Value>) -> Option<(u32, &'static Message)> {
    Some(if obj.contains_key("$ref") {
        (2, &JSON_REFERENCE)
    } else {
        (1, &RESPONSE)
    })
}

fn schema_item(obj: &Map<String, Value>) -> Option<(u32, &'static Message)> {
    Some(if str_of(obj, "type") == "file" {
        (2, &FILE_SCHEMA)
    } else {
        (1, &SCHEMA)
    })
}

fn security_definitions_item(obj: &Map<String, Value>) -> Option<(u32, &'static Message)> {
    match (str_of(obj, "type"), str_of(obj, "flow")) {
        ("basic", _) => Some((1, &BASIC_SECURITY)),
        ("apiKey", _) => Some((2, &API_KEY_SECURITY)),
        ("oauth2", "implicit") => Some((3, &OAUTH2_IMPLICIT)),
        ("oauth2", "password") => Some((4, &OAUTH2_TOKEN_URL)),
        ("oauth2", "application") => Some((5, &OAUTH2_TOKEN_URL)),
        ("oauth2", "accessCode") => Some((6, &OAUTH2_ACCESS_CODE)),
        _ => None,
    }
}

use Kind::{
    Any, Anys, Bool, Double, Int64, Msg, Msgs, SchemaList, SchemaOrBool, Str, StrList, Strs,
};

static DOCUMENT: Message = Message::Fields {
    fields: &[
        ("swagger", 1, Str),
        ("info", 2, Msg(&INFO)),
        ("host", 3, Str),
        ("basePath", 4, Str),
        ("schemes", 5, Strs),
        ("consumes", 6, Strs),
        ("produces", 7, Strs),
        ("paths", 8, Msg(&PATHS)),
        ("definitions", 9, Msg(&SCHEMAS)),
        ("parameters", 10, Msg(&PARAMETER_DEFINITIONS)),
        ("responses", 11, Msg(&RESPONSE_DEFINITIONS)),
        ("security", 12, Msgs(&SECURITY_REQUIREMENT)),
        ("securityDefinitions", 13, Msg(&SECURITY_DEFINITIONS)),
        ("tags", 14, Msgs(&TAG)),
        ("externalDocs", 15, Msg(&EXTERNAL_DOCS)),
    ],
    ext: Some(16),
};

static INFO: Message = Message::Fields {
    fields: &[
        ("title", 1, Str),
        ("version", 2, Str),
        ("description", 3, Str),
        ("termsOfService", 4, Str),
        ("contact", 5, Msg(&CONTACT)),
        ("license", 6, Msg(&LICENSE)),
    ],
    ext: Some(7),
};

static CONTACT: Message = Message::Fields {
    fields: &[("name", 1, Str), ("url", 2, Str), ("email", 3, Str)],
    ext: Some(4),
};

static LICENSE: Message = Message::Fields {
    fields: &[("name", 1, Str), ("url", 2, Str)],
    ext: Some(3),
};

static EXTERNAL_DOCS: Message = Message::Fields {
    fields: &[("description", 1, Str), ("url", 2, Str)],
    ext: Some(3),
};

static TAG: Message = Message::Fields {
    fields: &[
        ("name", 1, Str),
        ("description", 2, Str),
        ("externalDocs", 3, Msg(&EXTERNAL_DOCS)),
    ],
    ext: Some(4),
};

static PATHS: Message = Message::Map {
    tag: 2,
    value: Msg(&PATH_ITEM),
    keys: path_key,
    ext: Some(1),
};

static PATH_ITEM: Message = Message::Fields {
    fields: &[
        ("$ref", 1, Str),
        ("get", 2, Msg(&OPERATION)),
        ("put", 3, Msg(&OPERATION)),
        ("post", 4, Msg(&OPERATION)),
        ("delete", 5, Msg(&OPERATION)),
        ("options", 6, Msg(&OPERATION)),
        ("head", 7, Msg(&OPERATION)),
        ("patch", 8, Msg(&OPERATION)),
        ("parameters", 9, Msgs(&PARAMETERS_ITEM)),
    ],
    ext: Some(10),
};

static OPERATION: Message = Message::Fields {
    fields: &[
        ("tags", 1, Strs),
        ("summary", 2, Str),
        ("description", 3, Str),
        ("externalDocs", 4, Msg(&EXTERNAL_DOCS)),
        ("operationId", 5, Str),
        ("produces", 6, Strs),
        ("consumes", 7, Strs),
        ("parameters", 8, Msgs(&PARAMETERS_ITEM)),
        ("responses", 9, Msg(&RESPONSES)),
        ("schemes", 10, Strs),
        ("deprecated", 11, Bool),
        ("security", 12, Msgs(&SECURITY_REQUIREMENT)),
    ],
    ext: Some(13),
};

static PARAMETERS_ITEM: Message = Message::OneOf(parameters_item);
static PARAMETER: Message = Message::OneOf(parameter);
static NON_BODY_PARAMETER: Message = Message::OneOf(non_body_parameter);

static JSON_REFERENCE: Message = Message::Fields {
    fields: &[("$ref", 1, Str), ("description", 2, Str)],
    ext: None,
};

static BODY_PARAMETER: Message = Message::Fields {
    fields: &[
        ("description", 1, Str),
        ("name", 2, Str),
        ("in", 3, Str),
        ("required", 4, Bool),
        ("schema", 5, Msg(&SCHEMA)),
    ],
    ext: Some(6),
};

/// `HeaderParameterSubSchema` and `PathParameterSubSchema`, which number alike.
static HEADER_OR_PATH_PARAMETER: Message = Message::Fields {
    fields: &[
        ("required", 1, Bool),
        ("in", 2, Str),
        ("description", 3, Str),
        ("name", 4, Str),
        ("type", 5, Str),
        ("format", 6, Str),
        ("items", 7, Msg(&PRIMITIVES_ITEMS)),
        ("collectionFormat", 8, Str),
        ("default", 9, Any),
        ("maximum", 10, Double),
        ("exclusiveMaximum", 11, Bool),
        ("minimum", 12, Double),
        ("exclusiveMinimum", 13, Bool),
        ("maxLength", 14, Int64),
        ("minLength", 15, Int64),
        ("pattern", 16, Str),
        ("maxItems", 17, Int64),
        ("minItems", 18, Int64),
        ("uniqueItems", 19, Bool),
        ("enum", 20, Anys),
        ("multipleOf", 21, Double),
    ],
    ext: Some(22),
};

/// `QueryParameterSubSchema` and `FormDataParameterSubSchema`, which number alike.
static QUERY_OR_FORM_PARAMETER: Message = Message::Fields {
    fields: &[
        ("required", 1, Bool),
        ("in", 2, Str),
        ("description", 3, Str),
        ("name", 4, Str),
        ("allowEmptyValue", 5, Bool),
        ("type", 6, Str),
        ("format", 7, Str),
        ("items", 8, Msg(&PRIMITIVES_ITEMS)),
        ("collectionFormat", 9, Str),
        ("default", 10, Any),
        ("maximum", 11, Double),
        ("exclusiveMaximum", 12, Bool),
        ("minimum", 13, Double),
        ("exclusiveMinimum", 14, Bool),
        ("maxLength", 15, Int64),
        ("minLength", 16, Int64),
        ("pattern", 17, Str),
        ("maxItems", 18, Int64),
        ("minItems", 19, Int64),
        ("uniqueItems", 20, Bool),
        ("enum", 21, Anys),
        ("multipleOf", 22, Double),
    ],
    ext: Some(23),
};

/// The fields `PrimitivesItems` and `Header` share, numbered 1 to 17.
macro_rules! primitive_fields {
    ($($rest:expr),* $(,)?) => {
        &[
            ("type", 1, Str),
            ("format", 2, Str),
            ("items", 3, Msg(&PRIMITIVES_ITEMS)),
            ("collectionFormat", 4, Str),
            ("default", 5, Any),
            ("maximum", 6, Double),
            ("exclusiveMaximum", 7, Bool),
            ("minimum", 8, Double),
            ("exclusiveMinimum", 9, Bool),
            ("maxLength", 10, Int64),
            ("minLength", 11, Int64),
            ("pattern", 12, Str),
            ("maxItems", 13, Int64),
            ("minItems", 14, Int64),
            ("uniqueItems", 15, Bool),
            ("enum", 16, Anys),
            ("multipleOf", 17, Double),
            $($rest),*
        ]
    };
}

static PRIMITIVES_ITEMS: Message = Message::Fields {
    fields: primitive_fields!(),
    ext: Some(18),
};

static HEADER: Message = Message::Fields {
    fields: primitive_fields!(("description", 18, Str)),
    ext: Some(19),
};

static RESPONSES: Message = Message::Map {
    tag: 1,
    value: Msg(&RESPONSE_VALUE),
    keys: response_key,
    ext: Some(2),
};

static RESPONSE_VALUE: Message = Message::OneOf(response_value);

static RESPONSE: Message = Message::Fields {
    fields: &[
        ("description", 1, Str),
        ("schema", 2, Msg(&SCHEMA_ITEM)),
        ("headers", 3, Msg(&HEADERS)),
        ("examples", 4, Msg(&EXAMPLES)),
    ],
    ext: Some(5),
};

static SCHEMA_ITEM: Message = Message::OneOf(schema_item);

static FILE_SCHEMA: Message = Message::Fields {
    fields: &[
        ("format", 1, Str),
        ("title", 2, Str),
        ("description", 3, Str),
        ("default", 4, Any),
        ("required", 5, Strs),
        ("type", 6, Str),
        ("readOnly", 7, Bool),
        ("externalDocs", 8, Msg(&EXTERNAL_DOCS)),
        ("example", 9, Any),
    ],
    ext: Some(10),
};

static HEADERS: Message = Message::Map {
    tag: 1,
    value: Msg(&HEADER),
    keys: any_key,
    ext: None,
};

static EXAMPLES: Message = Message::Map {
    tag: 1,
    value: Any,
    keys: any_key,
    ext: None,
};

static SCHEMA: Message = Message::Fields {
    fields: &[
        ("$ref", 1, Str),
        ("format", 2, Str),
        ("title", 3, Str),
        ("description", 4, Str),
        ("default", 5, Any),
        ("multipleOf", 6, Double),
        ("maximum", 7, Double),
        ("exclusiveMaximum", 8, Bool),
        ("minimum", 9, Double),
        ("exclusiveMinimum", 10, Bool),
        ("maxLength", 11, Int64),
        ("minLength", 12, Int64),
        ("pattern", 13, Str),
        ("maxItems", 14, Int64),
        ("minItems", 15, Int64),
        ("uniqueItems", 16, Bool),
        ("maxProperties", 17, Int64),
        ("minProperties", 18, Int64),
        ("required", 19, Strs),
        ("enum", 20, Anys),
        ("additionalProperties", 21, SchemaOrBool),
        ("type", 22, StrList),
        ("items", 23, SchemaList),
        ("allOf", 24, Msgs(&SCHEMA)),
        ("properties", 25, Msg(&SCHEMAS)),
        ("discriminator", 26, Str),
        ("readOnly", 27, Bool),
        ("xml", 28, Msg(&XML)),
        ("externalDocs", 29, Msg(&EXTERNAL_DOCS)),
        ("example", 30, Any),
    ],
    ext: Some(31),
};

/// `Definitions` and `Properties`: schemas by name.
static SCHEMAS: Message = Message::Map {
    tag: 1,
    value: Msg(&SCHEMA),
    keys: any_key,
    ext: None,
};

static XML: Message = Message::Fields {
    fields: &[
        ("name", 1, Str),
        ("namespace", 2, Str),
        ("prefix", 3, Str),
        ("attribute", 4, Bool),
        ("wrapped", 5, Bool),
    ],
    ext: Some(6),
};

static PARAMETER_DEFINITIONS: Message = Message::Map {
    tag: 1,
    value: Msg(&PARAMETER),
    keys: any_key,
    ext: None,
};

static RESPONSE_DEFINITIONS: Message = Message::Map {
    tag: 1,
    value: Msg(&RESPONSE),
    keys: any_key,
    ext: None,
};

/// Scheme names to their scopes, each a `StringArray`.
static SECURITY_REQUIREMENT: Message = Message::Map {
    tag: 1,
    value: StrList,
    keys: any_key,
    ext: None,
};

static SECURITY_DEFINITIONS: Message = Message::Map {
    tag: 1,
    value: Msg(&SECURITY_DEFINITIONS_ITEM),
    keys: any_key,
    ext: None,
};

static SECURITY_DEFINITIONS_ITEM: Message = Message::OneOf(security_definitions_item);

static BASIC_SECURITY: Message = Message::Fields {
    fields: &[("type", 1, Str), ("description", 2, Str)],
    ext: Some(3),
};

static API_KEY_SECURITY: Message = Message::Fields {
    fields: &[
        ("type", 1, Str),
        ("name", 2, Str),
        ("in", 3, Str),
        ("description", 4, Str),
    ],
    ext: Some(5),
};

static OAUTH2_IMPLICIT: Message = Message::Fields {
    fields: &[
        ("type", 1, Str),
        ("flow", 2, Str),
        ("scopes", 3, Msg(&OAUTH2_SCOPES)),
        ("authorizationUrl", 4, Str),
        ("description", 5, Str),
    ],
    ext: Some(6),
};

/// `Oauth2PasswordSecurity` and `Oauth2ApplicationSecurity`, which number alike.
static OAUTH2_TOKEN_URL: Message = Message::Fields {
    fields: &[
        ("type", 1, Str),
        ("flow", 2, Str),
        ("scopes", 3, Msg(&OAUTH2_SCOPES)),
        ("tokenUrl", 4, Str),
        ("description", 5, Str),
    ],
    ext: Some(6),
};

static OAUTH2_ACCESS_CODE: Message = Message::Fields {
    fields: &[
        ("type", 1, Str),
        ("flow", 2, Str),
        ("scopes", 3, Msg(&OAUTH2_SCOPES)),
        ("authorizationUrl", 4, Str),
        ("tokenUrl", 5, Str),
        ("description", 6, Str),
    ],
    ext: Some(7),
};

static OAUTH2_SCOPES: Message = Message::Map {
    tag: 1,
    value: Str,
    keys: any_key,
    ext: None,
};

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Length-delimited field `tag` holding `inner` (both under 128 bytes once encoded).
    fn ld(tag: u8, inner: &[u8]) -> Vec<u8> {
        let key = tag << 3 | 2;
        let mut v = if key < 128 {
            vec![key]
        } else {
            vec![key | 128, 1]
        };
        v.push(u8::try_from(inner.len()).unwrap());
        v.extend_from_slice(inner);
        v
    }

    #[test]
    fn scalars_in_field_order_and_defaults_left_out() {
        let doc = json!({"info": {"version": "v1", "title": ""}, "swagger": "2.0"});
        let want = [ld(1, b"2.0"), ld(2, &ld(2, b"v1"))].concat();
        assert_eq!(document(&doc), want);
    }

    #[test]
    fn maps_become_named_pairs_and_extensions_named_any() {
        let doc = json!({"paths": {"x-a": 1, "/b": {}}, "x-top": "s"});
        let pair = [ld(1, b"/b"), ld(2, b"")].concat();
        let ext = |name: &[u8], yaml: &[u8]| [ld(1, name), ld(2, &ld(2, yaml))].concat();
        let paths = [ld(1, &ext(b"x-a", b"1\n")), ld(2, &pair)].concat();
        let want = [ld(8, &paths), ld(16, &ext(b"x-top", b"\"s\"\n"))].concat();
        assert_eq!(document(&doc), want);
    }

    #[test]
    fn oneofs_follow_gnostics_choices() {
        let body = json!({"in": "body", "name": "b", "schema": {"type": "object"}});
        let query = json!({"in": "query", "name": "q", "type": "string"});
        let reference = json!({"$ref": "#/parameters/p"});
        let doc = json!({"paths": {"/p": {"parameters": [body, query, reference]}}});
        let schema = ld(22, &ld(1, b"object"));
        let body = ld(
            1,
            &ld(1, &[ld(2, b"b"), ld(3, b"body"), ld(5, &schema)].concat()),
        );
        let query = ld(
            1,
            &ld(
                2,
                &ld(
                    3,
                    &[ld(2, b"query"), ld(4, b"q"), ld(6, b"string")].concat(),
                ),
            ),
        );
        let reference = ld(2, &ld(1, b"#/parameters/p"));
        let item = [ld(9, &body), ld(9, &query), ld(9, &reference)].concat();
        let want = ld(8, &ld(2, &[ld(1, b"/p"), ld(2, &item)].concat()));
        assert_eq!(document(&doc), want);
    }

    #[test]
    fn a_false_additional_properties_is_written() {
        let doc = json!({"definitions": {"s": {"additionalProperties": false}}});
        let schema = ld(21, &[2 << 3, 0]);
        assert_eq!(schema[..2], [0xaa, 0x01], "field 21, length-delimited");
        let want = ld(9, &ld(1, &[ld(1, b"s"), ld(2, &schema)].concat()));
        assert_eq!(document(&doc), want);
    }
}
