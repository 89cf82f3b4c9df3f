//! Valid arguments for a tool, made from its input schema.
//!
//! Deliberately small and honest: it covers what tool schemas usually say (types, `enum`,
//! `const`, string lengths, a few formats, simple patterns, number bounds, required object
//! properties, minimum array lengths) and refuses the rest with the property it could not
//! fill. Whatever it makes is still validated by the gate, so a value it gets wrong shows up
//! as an `invalid_arguments` answer, never as a silent pass.
//!
//! A `variant` number and a run `tag` go into every string, so two variants (or two runs
//! against one sandbox) are different intents wherever a key uses a string.

use serde_json::{Map, Value, json};

/// Deepest nesting of objects and arrays followed: a recursive schema must not recurse here.
const DEPTH_MAX: usize = 8;
/// Longest `minLength` or `minItems` honoured: beyond it a schema is not a tool's.
const LENGTH_MIN_MAX: u64 = 10_000;

/// Arguments for `schema`: every property of the top-level object (optional ones only when
/// they can be made), required ones of nested objects. `Err` names the property.
pub fn generate(schema: &Value, variant: u32, tag: &str) -> Result<Value, String> {
    let generator = Generator { variant, tag };
    generator.value(schema, "(the arguments)", 0, true)
}

/// A value of the top-level argument `name` of `schema`, valid by its schema and other than
/// `base`: `variant`'s own value, or, where that is the same (an `enum`, a `const`, a bounded
/// number), another of the `enum`'s values (which one depends on `variant`, so that two
/// variants differ where there are enough values) or the other boolean. `None` when the
/// schema allows no other value the generator can make.
pub fn alternative(
    schema: &Value,
    name: &str,
    base: &Value,
    variant: u32,
    tag: &str,
) -> Option<Value> {
    let property = schema.get("properties")?.get(name)?;
    let generator = Generator { variant, tag };
    if let Ok(value) = generator.value(property, name, 1, false)
        && value != *base
    {
        return Some(value);
    }
    if let Some(values) = property.get("enum").and_then(Value::as_array) {
        let others: Vec<&Value> = values.iter().filter(|value| *value != base).collect();
        if others.is_empty() {
            return None;
        }
        return Some(others[variant as usize % others.len()].clone());
    }
    match base {
        Value::Bool(flag) if property.get("const").is_none() => Some(Value::Bool(!flag)),
        _ => None,
    }
}

struct Generator<'a> {
    variant: u32,
    tag: &'a str,
}

impl Generator<'_> {
    fn value(&self, schema: &Value, name: &str, depth: usize, all: bool) -> Result<Value, String> {
        if depth > DEPTH_MAX {
            return Err(format!(
                "property `{name}`: nested deeper than {DEPTH_MAX} levels"
            ));
        }
        let Some(schema) = schema.as_object() else {
            // `true` (anything goes) or a schema that is not an object: a string will do for
            // `true`; `false` accepts nothing.
            return match schema {
                Value::Bool(true) => Ok(json!(self.text(1, None))),
                _ => Err(format!("property `{name}`: its schema accepts no value")),
            };
        };
        if let Some(value) = schema.get("const") {
            return Ok(value.clone());
        }
        if let Some(values) = schema.get("enum").and_then(Value::as_array) {
            return values
                .first()
                .cloned()
                .ok_or_else(|| format!("property `{name}`: its `enum` is empty"));
        }
        if schema.contains_key("$ref") {
            return Err(format!(
                "property `{name}`: `$ref` is not followed by the smoke test's generator"
            ));
        }
        for combinator in ["anyOf", "oneOf"] {
            if let Some(first) = schema
                .get(combinator)
                .and_then(Value::as_array)
                .and_then(|options| options.first())
            {
                return self.value(first, name, depth + 1, all);
            }
        }
        if schema.contains_key("allOf") || schema.contains_key("not") {
            return Err(format!(
                "property `{name}`: `allOf` and `not` are not handled by the smoke test's generator"
            ));
        }
        let kind = match schema.get("type") {
            Some(Value::String(kind)) => kind.as_str(),
            Some(Value::Array(kinds)) => {
                // The first type it can make a value of, null last: `[string, number]` with a
                // pattern it can't follow is a number (a pattern constrains strings only).
                let mut kinds: Vec<&str> = kinds.iter().filter_map(Value::as_str).collect();
                kinds.sort_by_key(|kind| *kind == "null");
                let mut first_error = None;
                for kind in kinds {
                    match self.of_kind(kind, schema, name, depth, all) {
                        Ok(value) => return Ok(value),
                        Err(error) => {
                            first_error.get_or_insert(error);
                        }
                    }
                }
                return Err(first_error.unwrap_or_else(|| {
                    format!("property `{name}`: its `type` list names no type")
                }));
            }
            _ if schema.contains_key("properties") => "object",
            _ => {
                return Err(format!(
                    "property `{name}`: no `type`, `enum` or `const` says what it holds"
                ));
            }
        };
        self.of_kind(kind, schema, name, depth, all)
    }

    /// A value of the JSON type `kind` by `schema`'s other keywords.
    fn of_kind(
        &self,
        kind: &str,
        schema: &Map<String, Value>,
        name: &str,
        depth: usize,
        all: bool,
    ) -> Result<Value, String> {
        match kind {
            "string" => self.string(schema, name).map(Value::String),
            "integer" => self.number(schema, name, true),
            "number" => self.number(schema, name, false),
            "boolean" => Ok(json!(true)),
            "null" => Ok(Value::Null),
            "array" => self.array(schema, name, depth),
            "object" => self.object(schema, name, depth, all),
            other => Err(format!("property `{name}`: unknown type `{other}`")),
        }
    }

    fn object(
        &self,
        schema: &Map<String, Value>,
        name: &str,
        depth: usize,
        all: bool,
    ) -> Result<Value, String> {
        let required: Vec<&str> = schema
            .get("required")
            .and_then(Value::as_array)
            .map(|names| names.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        let properties = schema.get("properties").and_then(Value::as_object);
        let mut object = Map::new();
        for property in &required {
            let Some(property_schema) = properties.and_then(|all| all.get(*property)) else {
                return Err(format!(
                    "property `{property}` of {name}: required, but `properties` does not describe it"
                ));
            };
            object.insert(
                (*property).to_owned(),
                self.value(property_schema, property, depth + 1, false)?,
            );
        }
        // Optional properties of the arguments themselves are filled when they can be, since
        // a request template may use them; a nested object stays minimal.
        if all && let Some(properties) = properties {
            for (property, property_schema) in properties {
                if object.contains_key(property) {
                    continue;
                }
                if let Ok(value) = self.value(property_schema, property, depth + 1, false) {
                    object.insert(property.clone(), value);
                }
            }
        }
        Ok(Value::Object(object))
    }

    fn array(
        &self,
        schema: &Map<String, Value>,
        name: &str,
        depth: usize,
    ) -> Result<Value, String> {
        let items_min = schema.get("minItems").and_then(Value::as_u64).unwrap_or(0);
        if items_min > LENGTH_MIN_MAX {
            return Err(format!(
                "property `{name}`: `minItems` {items_min} is too many"
            ));
        }
        if items_min == 0 {
            return Ok(json!([]));
        }
        let items = schema.get("items").unwrap_or(&Value::Bool(true));
        let mut values = Vec::new();
        for index in 0..items_min as u32 {
            // Each item its own variant, so `uniqueItems` holds for strings and numbers.
            let generator = Generator {
                variant: self.variant * 1000 + index,
                tag: self.tag,
            };
            values.push(generator.value(items, name, depth + 1, false)?);
        }
        Ok(Value::Array(values))
    }

    fn number(
        &self,
        schema: &Map<String, Value>,
        name: &str,
        integer: bool,
    ) -> Result<Value, String> {
        let number = |key: &str| schema.get(key).and_then(Value::as_f64);
        let low = match (number("minimum"), number("exclusiveMinimum")) {
            (Some(minimum), _) => Some(minimum),
            // A value strictly above: 1 more for integers, the next whole number otherwise.
            (None, Some(exclusive)) => Some(exclusive.floor() + 1.0),
            (None, None) => None,
        };
        let high = match (number("maximum"), number("exclusiveMaximum")) {
            (Some(maximum), _) => Some(maximum),
            (None, Some(exclusive)) => Some(exclusive.ceil() - 1.0),
            (None, None) => None,
        };
        let low = if integer { low.map(f64::ceil) } else { low };
        // 1 when allowed (else the lowest allowed), plus the variant so two variants differ.
        let mut value = match low {
            Some(low) if low > 1.0 => low,
            _ => 1.0,
        } + f64::from(self.variant.saturating_sub(1));
        if let Some(high) = high
            && value > high
        {
            value = match low {
                Some(low) if low <= high => {
                    let middle = (low + high) / 2.0;
                    if integer { middle.floor() } else { middle }
                }
                Some(_) => {
                    return Err(format!(
                        "property `{name}`: no number is both above its minimum and below its maximum"
                    ));
                }
                None => high,
            };
        }
        if integer || value.fract() == 0.0 {
            Ok(json!(value as i64))
        } else {
            Ok(json!(value))
        }
    }

    fn string(&self, schema: &Map<String, Value>, name: &str) -> Result<String, String> {
        let length_min = schema.get("minLength").and_then(Value::as_u64).unwrap_or(0);
        let length_max = schema.get("maxLength").and_then(Value::as_u64);
        if length_min > LENGTH_MIN_MAX {
            return Err(format!(
                "property `{name}`: `minLength` {length_min} is too long"
            ));
        }
        if let Some(pattern) = schema.get("pattern").and_then(Value::as_str) {
            let text = from_pattern(pattern, self.variant).ok_or_else(|| {
                format!(
                    "property `{name}`: can't make a string for the pattern {pattern:?} (the smoke \
test handles anchored patterns of character classes, \\d, \\w and literals with a \
quantifier); give the property an `enum` or a simpler pattern"
                )
            })?;
            return Ok(text);
        }
        let text = match schema.get("format").and_then(Value::as_str) {
            Some("email") => format!("smoke+{}{}@example.com", self.tag, self.variant),
            Some("date-time") => "2026-01-01T00:00:00Z".to_owned(),
            Some("date") => "2026-01-01".to_owned(),
            Some("time") => "12:00:00Z".to_owned(),
            Some("uri" | "url") => {
                format!("https://example.com/smoke/{}{}", self.tag, self.variant)
            }
            Some("uuid") => format!("00000000-0000-4000-8000-{:012}", self.variant),
            _ => return Ok(self.text(length_min, length_max)),
        };
        let length = text.chars().count() as u64;
        if length < length_min || length_max.is_some_and(|max| length > max) {
            return Err(format!(
                "property `{name}`: its format's example {text:?} does not fit its length bounds"
            ));
        }
        Ok(text)
    }

    /// `smoke{tag}{variant}`, padded to `length_min` and cut (keeping the end, which is the
    /// part that differs) to `length_max`.
    fn text(&self, length_min: u64, length_max: Option<u64>) -> String {
        let mut text = format!("smoke{}{}", self.tag, self.variant);
        while (text.len() as u64) < length_min {
            text.insert(0, 'x');
        }
        if let Some(max) = length_max
            && text.len() as u64 > max
        {
            text = text[text.len() - max as usize..].to_owned();
        }
        text
    }
}

/// A string matching `pattern` when it is `^` (atom quantifier?)* `$` with atoms `[...]`
/// (ranges and single characters), `\d`, `\w` or a literal character; `None` otherwise.
/// Picks the class's first character, and for the last variable atom the character
/// `variant` places on, so variants differ where they can.
fn from_pattern(pattern: &str, variant: u32) -> Option<String> {
    let body = pattern.strip_prefix('^')?.strip_suffix('$')?;
    let characters: Vec<char> = body.chars().collect();
    let mut index = 0;
    let mut atoms: Vec<(Vec<char>, usize)> = Vec::new();
    while index < characters.len() {
        let choices: Vec<char> = match characters[index] {
            '[' => {
                let end = index + characters[index..].iter().position(|c| *c == ']')?;
                let class = &characters[index + 1..end];
                if class.first() == Some(&'^') || class.contains(&'\\') {
                    return None;
                }
                let mut choices = Vec::new();
                let mut position = 0;
                while position < class.len() {
                    if position + 2 < class.len() && class[position + 1] == '-' {
                        choices.extend(class[position]..=class[position + 2]);
                        position += 3;
                    } else {
                        choices.push(class[position]);
                        position += 1;
                    }
                }
                index = end + 1;
                choices
            }
            '\\' => {
                let escaped = *characters.get(index + 1)?;
                index += 2;
                match escaped {
                    'd' => ('0'..='9').collect(),
                    'w' => ('a'..='z').collect(),
                    '-' | '.' | '_' | '+' | '@' | '/' | ':' => vec![escaped],
                    _ => return None,
                }
            }
            character if character.is_alphanumeric() || "-_:@/ ".contains(character) => {
                index += 1;
                vec![character]
            }
            _ => return None,
        };
        if choices.is_empty() {
            return None;
        }
        let count = match characters.get(index) {
            Some('{') => {
                let end = index + characters[index..].iter().position(|c| *c == '}')?;
                let inside: String = characters[index + 1..end].iter().collect();
                index = end + 1;
                let low = inside.split(',').next()?.trim().parse::<usize>().ok()?;
                low.max(1)
            }
            Some('+') => {
                index += 1;
                1
            }
            Some('?' | '*') => {
                index += 1;
                0
            }
            _ => 1,
        };
        if count > LENGTH_MIN_MAX as usize {
            return None;
        }
        atoms.push((choices, count));
    }
    let last_variable = atoms
        .iter()
        .rposition(|(choices, count)| choices.len() > 1 && *count > 0);
    let mut text = String::new();
    for (position, (choices, count)) in atoms.iter().enumerate() {
        for repeat in 0..*count {
            let pick = if Some(position) == last_variable && repeat + 1 == *count {
                (variant as usize).saturating_sub(1) % choices.len()
            } else {
                0
            };
            text.push(choices[pick]);
        }
    }
    Some(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_example_schemas_get_arguments_within_their_bounds() {
        let refund = json!({"type": "object", "properties": {
            "order_id": {"type": "string", "minLength": 1, "maxLength": 64},
            "amount": {"type": "number", "exclusiveMinimum": 0, "maximum": 100000},
            "reason": {"type": "string", "enum": ["requested_by_customer", "duplicate"]}},
            "required": ["order_id", "amount", "reason"], "additionalProperties": false});
        let arguments = generate(&refund, 1, "t1").unwrap();
        assert_eq!(
            arguments,
            json!({"order_id": "smoket11", "amount": 1, "reason": "requested_by_customer"})
        );
        let second = generate(&refund, 2, "t1").unwrap();
        assert_eq!(second["amount"], json!(2));
        let email = json!({"type": "object", "properties": {
            "to": {"type": "string", "format": "email", "maxLength": 254}}, "required": ["to"]});
        assert_eq!(
            generate(&email, 3, "ab").unwrap()["to"],
            json!("smoke+ab3@example.com")
        );
    }

    #[test]
    fn patterns_and_bounds() {
        assert_eq!(from_pattern("^[A-Z]{2}$", 1).as_deref(), Some("AA"));
        assert_eq!(from_pattern("^[A-Z]{2}$", 2).as_deref(), Some("AB"));
        assert_eq!(from_pattern("^ord_\\d{4}$", 1).as_deref(), Some("ord_0000"));
        assert_eq!(from_pattern("^(a|b)$", 1), None);
        let short = json!({"type": "string", "maxLength": 3});
        assert_eq!(generate(&short, 7, "tag").unwrap(), json!("ag7"));
        let long = json!({"type": "string", "minLength": 12});
        assert_eq!(generate(&long, 1, "t").unwrap().as_str().unwrap().len(), 12);
        let bounded = json!({"type": "integer", "minimum": 5, "maximum": 5});
        assert_eq!(generate(&bounded, 3, "t").unwrap(), json!(5));
    }

    #[test]
    fn every_format_it_makes_passes_the_gates_validator() {
        // The gate asserts formats, so an example the gate would refuse would fail the smoke
        // test on the arguments instead of on what it checks.
        let schema = json!({"type": "object", "properties": {
            "email": {"type": "string", "format": "email"},
            "at": {"type": "string", "format": "date-time"},
            "day": {"type": "string", "format": "date"},
            "time": {"type": "string", "format": "time"},
            "site": {"type": "string", "format": "uri"},
            "id": {"type": "string", "format": "uuid"},
            "amount": {"type": "number", "exclusiveMinimum": 0, "maximum": 100000, "multipleOf": 0.01}}});
        let validator = intentgate_gate::schema::validator(&schema).unwrap();
        for variant in [1, 2, 999_999] {
            let arguments = generate(&schema, variant, "k3x9z").unwrap();
            let errors: Vec<String> = validator
                .iter_errors(&arguments)
                .map(|error| format!("{}: {error}", error.instance_path()))
                .collect();
            assert!(errors.is_empty(), "{arguments}: {errors:?}");
        }
    }

    #[test]
    fn an_alternative_differs_from_the_base_or_is_none() {
        let schema = json!({"type": "object", "properties": {
            "order_id": {"type": "string", "minLength": 1},
            "amount": {"type": "number", "exclusiveMinimum": 0},
            "template": {"type": "string", "enum": ["a", "b", "c"]},
            "flag": {"type": "boolean"},
            "only": {"type": "string", "enum": ["x"]},
            "fixed": {"type": "integer", "minimum": 5, "maximum": 5}}});
        let base = generate(&schema, 3, "t").unwrap();
        let order = alternative(&schema, "order_id", &base["order_id"], 4, "t").unwrap();
        assert_eq!(order, json!("smoket4"));
        assert_eq!(
            alternative(&schema, "amount", &base["amount"], 4, "t"),
            Some(json!(4))
        );
        // Two variants take two different other values of an enum of three.
        let four = alternative(&schema, "template", &base["template"], 4, "t").unwrap();
        let five = alternative(&schema, "template", &base["template"], 5, "t").unwrap();
        assert_ne!(four, base["template"]);
        assert_ne!(five, base["template"]);
        assert_ne!(four, five);
        assert_eq!(
            alternative(&schema, "flag", &json!(true), 4, "t"),
            Some(json!(false))
        );
        assert_eq!(alternative(&schema, "only", &base["only"], 4, "t"), None);
        assert_eq!(alternative(&schema, "fixed", &base["fixed"], 4, "t"), None);
        assert_eq!(alternative(&schema, "absent", &json!(1), 4, "t"), None);
    }

    #[test]
    fn a_type_list_takes_the_first_type_it_can_make() {
        // Stripe's example: an amount as a decimal string or a number; the string's pattern
        // is beyond the generator, the number is not.
        let amount = json!({"type": ["string", "number"],
            "pattern": "^(0|[1-9][0-9]{0,7})(\\.[0-9]{1,2})?$",
            "exclusiveMinimum": 0, "maximum": 999999.99});
        let schema = json!({"type": "object", "properties": {"amount": amount},
            "required": ["amount"]});
        assert_eq!(generate(&schema, 1, "t").unwrap(), json!({"amount": 1}));
        assert_eq!(
            alternative(&schema, "amount", &json!(1), 4, "t"),
            Some(json!(4))
        );
        // A string it can make comes first, as listed; null only when nothing else can be.
        let either = json!({"type": ["null", "string", "number"], "pattern": "^[a-z]{2}$"});
        assert_eq!(generate(&either, 1, "t").unwrap(), json!("aa"));
        let nothing_else = json!({"type": ["string", "null"], "pattern": "^(a|b)$"});
        assert_eq!(generate(&nothing_else, 1, "t").unwrap(), Value::Null);
        let nothing = json!({"type": ["string"], "pattern": "^(a|b)$"});
        assert!(generate(&nothing, 1, "t").unwrap_err().contains("pattern"));
    }

    #[test]
    fn what_it_cannot_make_is_named() {
        let schema = json!({"type": "object", "properties": {
            "code": {"type": "string", "pattern": "^(a|b)+$"}}, "required": ["code"]});
        let error = generate(&schema, 1, "t").unwrap_err();
        assert!(error.contains("`code`"), "{error}");
    }
}
