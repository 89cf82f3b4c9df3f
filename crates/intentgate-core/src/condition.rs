//! Conditions over a call's exact arguments: the small expression form a policy uses to say
//! when a call needs a person's approval (`amount > 100.00`, `reason in ["fraudulent",
//! "duplicate"]`, `customer.country != "US" and amount >= 50`).
//!
//! The form, whole:
//!
//! ```text
//! condition   := conjunction ("or" conjunction)*
//! conjunction := operand ("and" operand)*
//! operand     := "not" operand | "(" condition ")" | comparison
//! comparison := argument ("==" | "!=" | "<" | "<=" | ">" | ">=") literal
//!             | argument ["not"] "in" "[" literal ("," literal)* "]"
//! argument   := name ("." name)*          a top-level argument, or a member of an object one
//! literal    := a number (49, 100.00, -3) | a string ("US" or 'US') | true | false
//! ```
//!
//! Numbers are compared as exact decimals, never through a float: `100.00` is `100`, and
//! `100.000000000000000001 > 100` holds. An argument compared with a number may be a JSON
//! number or a string that spells one (`"49.00"`), as amounts often travel. `<`, `<=`, `>` and
//! `>=` take a number; `==`, `!=` and `in` take numbers, strings or booleans. A comparison
//! whose argument the call left out, sent as `null`, or sent as another kind of value than
//! the literal does not hold, whatever its operator (so `country != "US"` does not hold for a
//! call without a country): a policy that must catch those says so with `or`.
//!
//! This module parses and evaluates; it knows nothing of tools or schemas. The config check
//! compares [`Condition::arguments`] with the tool's input schema.

use std::cmp::Ordering;
use std::fmt;

use serde_json::Value;

use crate::number::ExactNumber;

/// The longest condition text accepted: a policy is a line or two, never a program.
pub const CONDITION_LENGTH_MAX: usize = 10_000;
/// How deeply `not` and parentheses may nest: bounds the parser's recursion.
pub const CONDITION_DEPTH_MAX: usize = 32;
/// The most literals one `in [...]` list may hold.
pub const CONDITION_LIST_MAX: usize = 1_000;

/// A parsed condition, ready to be evaluated against any call's arguments.
#[derive(Debug, Clone, PartialEq)]
pub struct Condition {
    text: String,
    root: Expression,
}

/// Why a condition's text is not a condition: where (a character offset into the text), what,
/// and how to write it instead.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message} (at character {offset})")]
pub struct ConditionError {
    /// Characters before the problem, counted from 0.
    pub offset: usize,
    pub message: String,
    pub fix: String,
}

#[derive(Debug, Clone, PartialEq)]
enum Expression {
    Or(Vec<Expression>),
    And(Vec<Expression>),
    Not(Box<Expression>),
    Compare {
        argument: Vec<String>,
        operator: Operator,
        literal: Literal,
    },
    In {
        argument: Vec<String>,
        negated: bool,
        literals: Vec<Literal>,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Operator {
    Equal,
    NotEqual,
    Less,
    LessOrEqual,
    Greater,
    GreaterOrEqual,
}

impl Operator {
    fn orders(self) -> bool {
        !matches!(self, Operator::Equal | Operator::NotEqual)
    }
}

#[derive(Debug, Clone, PartialEq)]
enum Literal {
    Number(ExactNumber),
    Text(String),
    Boolean(bool),
}

impl Literal {
    fn kind(&self) -> &'static str {
        match self {
            Literal::Number(_) => "a number",
            Literal::Text(_) => "a string",
            Literal::Boolean(_) => "a boolean",
        }
    }

    /// How `value` compares with this literal, or `None` when they are not of one kind.
    fn compare(&self, value: &Value) -> Option<Ordering> {
        match (self, value) {
            (Literal::Number(literal), Value::Number(number)) => {
                ExactNumber::parse(number.as_str())
                    .ok()
                    .map(|n| n.cmp(literal))
            }
            (Literal::Number(literal), Value::String(text)) => {
                ExactNumber::parse(text).ok().map(|n| n.cmp(literal))
            }
            (Literal::Text(literal), Value::String(text)) => (text == literal)
                .then_some(Ordering::Equal)
                .or(Some(Ordering::Less)),
            (Literal::Boolean(literal), Value::Bool(flag)) => (flag == literal)
                .then_some(Ordering::Equal)
                .or(Some(Ordering::Less)),
            _ => None,
        }
    }
}

impl Condition {
    /// Parses a condition, refusing anything outside the form in the module's documentation
    /// with where it went wrong and what to write.
    pub fn parse(text: &str) -> Result<Condition, ConditionError> {
        if text.chars().count() > CONDITION_LENGTH_MAX {
            return Err(ConditionError {
                offset: CONDITION_LENGTH_MAX,
                message: format!("a condition is at most {CONDITION_LENGTH_MAX} characters"),
                fix: "split the policy, or list the values in fewer words".to_owned(),
            });
        }
        let tokens = tokenize(text)?;
        let mut parser = Parser {
            tokens: &tokens,
            position: 0,
            depth: 0,
            end: text.chars().count(),
        };
        let root = parser.condition()?;
        if let Some(token) = parser.peek() {
            return Err(ConditionError {
                offset: token.offset,
                message: format!("unexpected {} after a whole condition", token.kind),
                fix: "join conditions with `and` or `or`".to_owned(),
            });
        }
        Ok(Condition {
            text: text.to_owned(),
            root,
        })
    }

    /// Whether the condition holds for these arguments (a JSON object).
    pub fn holds(&self, arguments: &Value) -> bool {
        evaluate(&self.root, arguments)
    }

    /// The arguments the condition reads, as paths of names (`["customer", "country"]`), each
    /// once, in the order they first appear.
    pub fn arguments(&self) -> Vec<Vec<String>> {
        let mut found: Vec<Vec<String>> = Vec::new();
        collect_arguments(&self.root, false, &mut found);
        found
    }

    /// The arguments compared with a number, which must be numbers (or strings that spell
    /// them) in the tool's schema.
    pub fn numeric_arguments(&self) -> Vec<Vec<String>> {
        let mut found: Vec<Vec<String>> = Vec::new();
        collect_arguments(&self.root, true, &mut found);
        found
    }

    /// The text the condition was parsed from.
    pub fn text(&self) -> &str {
        &self.text
    }
}

impl fmt::Display for Condition {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str(&self.text)
    }
}

fn evaluate(expression: &Expression, arguments: &Value) -> bool {
    match expression {
        Expression::Or(parts) => parts.iter().any(|part| evaluate(part, arguments)),
        Expression::And(parts) => parts.iter().all(|part| evaluate(part, arguments)),
        Expression::Not(inner) => !evaluate(inner, arguments),
        Expression::Compare {
            argument,
            operator,
            literal,
        } => {
            let Some(value) = lookup(arguments, argument) else {
                return false;
            };
            let Some(ordering) = literal.compare(value) else {
                return false;
            };
            match operator {
                Operator::Equal => ordering == Ordering::Equal,
                Operator::NotEqual => ordering != Ordering::Equal,
                Operator::Less => ordering == Ordering::Less,
                Operator::LessOrEqual => ordering != Ordering::Greater,
                Operator::Greater => ordering == Ordering::Greater,
                Operator::GreaterOrEqual => ordering != Ordering::Less,
            }
        }
        Expression::In {
            argument,
            negated,
            literals,
        } => {
            let Some(value) = lookup(arguments, argument) else {
                return false;
            };
            let comparable: Vec<Option<Ordering>> = literals
                .iter()
                .map(|literal| literal.compare(value))
                .collect();
            if comparable.iter().all(Option::is_none) {
                return false;
            }
            let member = comparable.contains(&Some(Ordering::Equal));
            member != *negated
        }
    }
}

/// The value at `path` in `arguments`; `None` when absent or `null`.
fn lookup<'a>(arguments: &'a Value, path: &[String]) -> Option<&'a Value> {
    let mut value = arguments;
    for name in path {
        value = value.as_object()?.get(name)?;
    }
    (!value.is_null()).then_some(value)
}

/// Adds to `found` each argument `expression` reads (only those compared with a number, when
/// `numeric_only`), once each, in order of appearance.
fn collect_arguments(expression: &Expression, numeric_only: bool, found: &mut Vec<Vec<String>>) {
    let (argument, numeric) = match expression {
        Expression::Or(parts) | Expression::And(parts) => {
            for part in parts {
                collect_arguments(part, numeric_only, found);
            }
            return;
        }
        Expression::Not(inner) => return collect_arguments(inner, numeric_only, found),
        Expression::Compare {
            argument, literal, ..
        } => (argument, matches!(literal, Literal::Number(_))),
        Expression::In {
            argument, literals, ..
        } => (
            argument,
            matches!(literals.first(), Some(Literal::Number(_))),
        ),
    };
    if (numeric || !numeric_only) && !found.contains(argument) {
        found.push(argument.clone());
    }
}

#[derive(Debug, Clone, PartialEq)]
enum Kind {
    Name(String),
    Number(String),
    Text(String),
    Operator(Operator),
    OpenParen,
    CloseParen,
    OpenBracket,
    CloseBracket,
    Comma,
    Dot,
}

impl fmt::Display for Kind {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Kind::Name(name) => write!(formatter, "`{name}`"),
            Kind::Number(number) => write!(formatter, "number `{number}`"),
            Kind::Text(_) => formatter.write_str("a string"),
            Kind::Operator(operator) => write!(formatter, "`{}`", operator_text(*operator)),
            Kind::OpenParen => formatter.write_str("`(`"),
            Kind::CloseParen => formatter.write_str("`)`"),
            Kind::OpenBracket => formatter.write_str("`[`"),
            Kind::CloseBracket => formatter.write_str("`]`"),
            Kind::Comma => formatter.write_str("`,`"),
            Kind::Dot => formatter.write_str("`.`"),
        }
    }
}

fn operator_text(operator: Operator) -> &'static str {
    match operator {
        Operator::Equal => "==",
        Operator::NotEqual => "!=",
        Operator::Less => "<",
        Operator::LessOrEqual => "<=",
        Operator::Greater => ">",
        Operator::GreaterOrEqual => ">=",
    }
}

#[derive(Debug, Clone, PartialEq)]
struct Token {
    kind: Kind,
    /// Characters before the token.
    offset: usize,
}

fn tokenize(text: &str) -> Result<Vec<Token>, ConditionError> {
    let characters: Vec<char> = text.chars().collect();
    let mut tokens = Vec::new();
    let mut index = 0;
    while index < characters.len() {
        let character = characters[index];
        let start = index;
        // The token, and the index of the character after it.
        let (kind, next) = match character {
            ' ' | '\t' | '\n' | '\r' => {
                index += 1;
                continue;
            }
            '(' => (Kind::OpenParen, start + 1),
            ')' => (Kind::CloseParen, start + 1),
            '[' => (Kind::OpenBracket, start + 1),
            ']' => (Kind::CloseBracket, start + 1),
            ',' => (Kind::Comma, start + 1),
            '.' if !characters.get(index + 1).is_some_and(char::is_ascii_digit) => {
                (Kind::Dot, start + 1)
            }
            '=' | '!' | '<' | '>' => {
                let (operator, width) = operator_at(&characters, start)?;
                (Kind::Operator(operator), start + width)
            }
            '"' | '\'' => {
                let (value, closing) = quoted_at(&characters, start)?;
                (Kind::Text(value), closing + 1)
            }
            '-' | '+' | '0'..='9' | '.' => {
                let end = number_end(&characters, start);
                (Kind::Number(characters[start..end].iter().collect()), end)
            }
            character if character.is_alphabetic() || character == '_' => {
                let mut end = start + 1;
                while end < characters.len()
                    && (characters[end].is_alphanumeric() || characters[end] == '_')
                {
                    end += 1;
                }
                (Kind::Name(characters[start..end].iter().collect()), end)
            }
            other => {
                return Err(ConditionError {
                    offset: start,
                    message: format!("`{}` can't appear in a condition", other.escape_default()),
                    fix: "compare an argument with a value: `amount > 100.00`, \
                          `reason in [\"fraudulent\"]`"
                        .to_owned(),
                });
            }
        };
        tokens.push(Token {
            kind,
            offset: start,
        });
        index = next;
    }
    Ok(tokens)
}

/// The comparison operator that starts at `start` (one of `=`, `!`, `<`, `>`), and how many
/// characters it takes.
fn operator_at(characters: &[char], start: usize) -> Result<(Operator, usize), ConditionError> {
    let next = characters.get(start + 1).copied();
    match (characters[start], next) {
        ('=', Some('=')) => Ok((Operator::Equal, 2)),
        ('!', Some('=')) => Ok((Operator::NotEqual, 2)),
        ('<', Some('=')) => Ok((Operator::LessOrEqual, 2)),
        ('>', Some('=')) => Ok((Operator::GreaterOrEqual, 2)),
        ('<', _) => Ok((Operator::Less, 1)),
        ('>', _) => Ok((Operator::Greater, 1)),
        ('=', _) => Err(ConditionError {
            offset: start,
            message: "`=` alone is not a comparison".to_owned(),
            fix: "write `==` to compare for equality".to_owned(),
        }),
        _ => Err(ConditionError {
            offset: start,
            message: "`!` alone is not an operator".to_owned(),
            fix: "write `!=` for \"not equal\", or `not` before a condition".to_owned(),
        }),
    }
}

/// The string quoted from `start` (its quote mark) with its escapes undone, and the index of
/// its closing quote mark.
fn quoted_at(characters: &[char], start: usize) -> Result<(String, usize), ConditionError> {
    let quote = characters[start];
    let mut value = String::new();
    let mut index = start + 1;
    loop {
        match characters.get(index) {
            None => {
                return Err(ConditionError {
                    offset: start,
                    message: "a string is never closed".to_owned(),
                    fix: format!("end the string with {quote}"),
                });
            }
            Some('\\') => {
                match characters.get(index + 1) {
                    Some(escaped @ ('\\' | '"' | '\'')) => value.push(*escaped),
                    _ => {
                        return Err(ConditionError {
                            offset: index,
                            message: "only \\\\, \\\" and \\' may follow a backslash".to_owned(),
                            fix: "write the character itself, or quote the string with the \
                                  other quote mark"
                                .to_owned(),
                        });
                    }
                }
                index += 2;
            }
            Some(closing) if *closing == quote => return Ok((value, index)),
            Some(other) => {
                value.push(*other);
                index += 1;
            }
        }
    }
}

/// The index after the number that starts at `start`: digits, `.`, and an exponent with its
/// sign. Whether it is a number is for the parser to say.
fn number_end(characters: &[char], start: usize) -> usize {
    let mut end = start + 1;
    while end < characters.len()
        && (characters[end].is_ascii_digit()
            || matches!(characters[end], '.' | 'e' | 'E')
            || (matches!(characters[end], '-' | '+') && matches!(characters[end - 1], 'e' | 'E')))
    {
        end += 1;
    }
    end
}

struct Parser<'a> {
    tokens: &'a [Token],
    position: usize,
    depth: usize,
    /// The text's length, where an error at the end points.
    end: usize,
}

impl Parser<'_> {
    fn peek(&self) -> Option<&Token> {
        self.tokens.get(self.position)
    }

    fn next(&mut self) -> Option<Token> {
        let token = self.tokens.get(self.position).cloned();
        self.position += 1;
        token
    }

    fn offset(&self) -> usize {
        self.peek().map_or(self.end, |token| token.offset)
    }

    fn at_word(&self, word: &str) -> bool {
        matches!(self.peek(), Some(Token { kind: Kind::Name(name), .. }) if name == word)
    }

    /// `conjunction ("or" conjunction)*`.
    fn condition(&mut self) -> Result<Expression, ConditionError> {
        self.joined("or", Parser::conjunction, Expression::Or)
    }

    /// `operand ("and" operand)*`.
    fn conjunction(&mut self) -> Result<Expression, ConditionError> {
        self.joined("and", Parser::operand, Expression::And)
    }

    /// One or more `part`s separated by `word`, joined by `join` when there are several.
    fn joined(
        &mut self,
        word: &str,
        part: fn(&mut Self) -> Result<Expression, ConditionError>,
        join: fn(Vec<Expression>) -> Expression,
    ) -> Result<Expression, ConditionError> {
        let mut parts = vec![part(self)?];
        while self.at_word(word) {
            self.position += 1;
            parts.push(part(self)?);
        }
        Ok(if parts.len() == 1 {
            parts.remove(0)
        } else {
            join(parts)
        })
    }

    /// `"not" operand | "(" condition ")" | comparison`.
    fn operand(&mut self) -> Result<Expression, ConditionError> {
        if self.depth >= CONDITION_DEPTH_MAX {
            return Err(ConditionError {
                offset: self.offset(),
                message: format!(
                    "`not` and parentheses nest at most {CONDITION_DEPTH_MAX} deep here"
                ),
                fix: "write the condition flatter".to_owned(),
            });
        }
        self.depth += 1;
        let expression = if self.at_word("not") {
            self.position += 1;
            Expression::Not(Box::new(self.operand()?))
        } else if matches!(
            self.peek(),
            Some(Token {
                kind: Kind::OpenParen,
                ..
            })
        ) {
            self.position += 1;
            let inner = self.condition()?;
            self.expect(&Kind::CloseParen, "close the parenthesis with `)`")?;
            inner
        } else {
            self.comparison()?
        };
        self.depth -= 1;
        Ok(expression)
    }

    fn expect(&mut self, kind: &Kind, fix: &str) -> Result<(), ConditionError> {
        let offset = self.offset();
        match self.next() {
            Some(token) if token.kind == *kind => Ok(()),
            Some(token) => Err(ConditionError {
                offset,
                message: format!("expected {kind}, found {}", token.kind),
                fix: fix.to_owned(),
            }),
            None => Err(ConditionError {
                offset,
                message: format!("the condition ends where {kind} was expected"),
                fix: fix.to_owned(),
            }),
        }
    }

    fn comparison(&mut self) -> Result<Expression, ConditionError> {
        let argument = self.argument()?;
        let offset = self.offset();
        let negated = self.at_word("not");
        if negated {
            self.position += 1;
        }
        if self.at_word("in") {
            self.position += 1;
            let literals = self.list()?;
            return Ok(Expression::In {
                argument,
                negated,
                literals,
            });
        }
        if negated {
            return Err(ConditionError {
                offset,
                message: "`not` after an argument must be followed by `in`".to_owned(),
                fix: "write `name not in [...]`, or `not` before the whole comparison".to_owned(),
            });
        }
        let operator = match self.next() {
            Some(Token {
                kind: Kind::Operator(operator),
                ..
            }) => operator,
            found => {
                return Err(ConditionError {
                    offset,
                    message: match found {
                        Some(token) => format!(
                            "expected a comparison after `{}`, found {}",
                            argument.join("."),
                            token.kind
                        ),
                        None => format!(
                            "the condition ends after `{}` without a comparison",
                            argument.join(".")
                        ),
                    },
                    fix: "compare it: `==`, `!=`, `<`, `<=`, `>`, `>=` and a value, or `in [...]`"
                        .to_owned(),
                });
            }
        };
        let literal_offset = self.offset();
        let literal = self.literal()?;
        if operator.orders() && !matches!(literal, Literal::Number(_)) {
            return Err(ConditionError {
                offset: literal_offset,
                message: format!(
                    "`{}` orders numbers, and this is {}",
                    operator_text(operator),
                    literal.kind()
                ),
                fix: "compare with a number (`amount > 100.00`), or use `==`, `!=` or `in`"
                    .to_owned(),
            });
        }
        Ok(Expression::Compare {
            argument,
            operator,
            literal,
        })
    }

    fn argument(&mut self) -> Result<Vec<String>, ConditionError> {
        let mut path = Vec::new();
        loop {
            let offset = self.offset();
            match self.next() {
                Some(Token {
                    kind: Kind::Name(name),
                    ..
                }) if !matches!(
                    name.as_str(),
                    "and" | "or" | "not" | "in" | "true" | "false"
                ) =>
                {
                    path.push(name)
                }
                found => {
                    return Err(ConditionError {
                        offset,
                        message: match found {
                            Some(token) => {
                                format!("expected an argument's name, found {}", token.kind)
                            }
                            None => "the condition ends where an argument's name was expected"
                                .to_owned(),
                        },
                        fix: "start each comparison with an argument of the tool, such as \
                              `amount > 100.00`"
                            .to_owned(),
                    });
                }
            }
            if matches!(
                self.peek(),
                Some(Token {
                    kind: Kind::Dot,
                    ..
                })
            ) {
                self.position += 1;
            } else {
                return Ok(path);
            }
        }
    }

    fn literal(&mut self) -> Result<Literal, ConditionError> {
        let offset = self.offset();
        match self.next() {
            Some(Token {
                kind: Kind::Number(text),
                ..
            }) => ExactNumber::parse(&text)
                .map(Literal::Number)
                .map_err(|error| ConditionError {
                    offset,
                    message: error.to_string(),
                    fix: "write the number as digits with an optional point, like 100.00"
                        .to_owned(),
                }),
            Some(Token {
                kind: Kind::Text(text),
                ..
            }) => Ok(Literal::Text(text)),
            Some(Token {
                kind: Kind::Name(name),
                ..
            }) if name == "true" || name == "false" => Ok(Literal::Boolean(name == "true")),
            found => Err(ConditionError {
                offset,
                message: match found {
                    Some(Token {
                        kind: Kind::Name(name),
                        ..
                    }) => format!("`{name}` is not a value"),
                    Some(token) => format!("expected a value, found {}", token.kind),
                    None => "the condition ends where a value was expected".to_owned(),
                },
                fix: "write a number (100.00), a quoted string (\"US\"), true or false; an \
                      argument can't be compared with another argument"
                    .to_owned(),
            }),
        }
    }

    fn list(&mut self) -> Result<Vec<Literal>, ConditionError> {
        self.expect(
            &Kind::OpenBracket,
            "write the values in brackets: `in [\"a\", \"b\"]`",
        )?;
        let mut literals = Vec::new();
        loop {
            let offset = self.offset();
            let literal = self.literal()?;
            if let Some(first) = literals.first()
                && std::mem::discriminant(first) != std::mem::discriminant(&literal)
            {
                return Err(ConditionError {
                    offset,
                    message: format!(
                        "this list mixes {} and {}",
                        Literal::kind(first),
                        literal.kind()
                    ),
                    fix: "make every value of the list one kind".to_owned(),
                });
            }
            literals.push(literal);
            if literals.len() > CONDITION_LIST_MAX {
                return Err(ConditionError {
                    offset,
                    message: format!("a list holds at most {CONDITION_LIST_MAX} values"),
                    fix: "compare with fewer values".to_owned(),
                });
            }
            let offset = self.offset();
            match self.next() {
                Some(Token {
                    kind: Kind::Comma, ..
                }) => continue,
                Some(Token {
                    kind: Kind::CloseBracket,
                    ..
                }) => return Ok(literals),
                found => {
                    return Err(ConditionError {
                        offset,
                        message: match found {
                            Some(token) => format!("expected `,` or `]`, found {}", token.kind),
                            None => "the list is never closed".to_owned(),
                        },
                        fix: "separate the values with commas and close the list with `]`"
                            .to_owned(),
                    });
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn holds(condition: &str, arguments: Value) -> bool {
        Condition::parse(condition).unwrap().holds(&arguments)
    }

    fn refused(condition: &str) -> ConditionError {
        Condition::parse(condition).expect_err(condition)
    }

    #[test]
    fn numbers_compare_exactly_however_they_are_written() {
        assert!(holds("amount > 100.00", json!({"amount": 100.01})));
        assert!(!holds("amount > 100.00", json!({"amount": 100})));
        assert!(holds("amount >= 100", json!({"amount": "100.00"})));
        assert!(holds("amount == 49", json!({"amount": "49.000"})));
        // A float would read both sides as 100.
        let arguments: Value =
            serde_json::from_str(r#"{"amount": 100.000000000000000001}"#).unwrap();
        assert!(holds("amount > 100", arguments.clone()));
        assert!(!holds("amount <= 100", arguments));
        assert!(holds("amount < -0.5", json!({"amount": -1})));
        assert!(holds("amount != 1e2", json!({"amount": 99.99})));
    }

    #[test]
    fn strings_booleans_and_lists() {
        let arguments = json!({"reason": "fraudulent", "customer": {"country": "US", "vip": true}});
        assert!(holds(
            "reason in [\"fraudulent\", 'duplicate']",
            arguments.clone()
        ));
        assert!(!holds("reason not in [\"fraudulent\"]", arguments.clone()));
        assert!(holds(
            "customer.country == \"US\" and customer.vip == true",
            arguments.clone()
        ));
        assert!(holds("customer.country != 'FR'", arguments.clone()));
        assert!(holds(
            "amount in [1, 2] or reason == 'fraudulent'",
            json!({"reason": "fraudulent", "amount": 3})
        ));
        assert!(holds("amount in [1.0, 2]", json!({"amount": "1"})));
    }

    #[test]
    fn precedence_and_grouping() {
        let arguments = json!({"a": 1, "b": 2, "c": 3});
        // `and` binds tighter than `or`.
        assert!(holds("a == 9 and b == 9 or c == 3", arguments.clone()));
        assert!(!holds("a == 9 and (b == 9 or c == 3)", arguments.clone()));
        assert!(holds("not a == 9", arguments.clone()));
        assert!(!holds("not (a == 1 or b == 9)", arguments));
    }

    #[test]
    fn an_absent_null_or_other_kind_of_argument_never_holds() {
        for condition in [
            "country == \"US\"",
            "country != \"US\"",
            "country in [\"US\"]",
            "country not in [\"US\"]",
        ] {
            assert!(!holds(condition, json!({})), "{condition} on nothing");
            assert!(
                !holds(condition, json!({"country": null})),
                "{condition} on null"
            );
            assert!(
                !holds(condition, json!({"country": 7})),
                "{condition} on a number"
            );
        }
        assert!(!holds("amount > 1", json!({"amount": "lots"})));
        assert!(!holds("amount > 1", json!({"amount": [2]})));
        assert!(!holds(
            "customer.country == 'US'",
            json!({"customer": "US"})
        ));
        // `not` outside a comparison is plain negation, so it can say "or left out".
        assert!(holds("not country == \"US\"", json!({})));
    }

    #[test]
    fn arguments_are_listed_for_the_config_check() {
        let condition = Condition::parse(
            "amount > 100 and (reason in ['a'] or customer.country == 'US') and amount < 9000",
        )
        .unwrap();
        assert_eq!(
            condition.arguments(),
            vec![
                vec!["amount".to_owned()],
                vec!["reason".to_owned()],
                vec!["customer".to_owned(), "country".to_owned()]
            ]
        );
        assert_eq!(
            condition.numeric_arguments(),
            vec![vec!["amount".to_owned()]]
        );
    }

    #[test]
    fn malformed_conditions_say_where_and_how_to_fix_them() {
        let error = refused("amount = 100");
        assert_eq!(error.offset, 7);
        assert!(error.fix.contains("=="), "{error:?}");

        let error = refused("reason > \"a\"");
        assert_eq!(error.offset, 9);
        assert!(error.message.contains("orders numbers"), "{error:?}");

        assert!(refused("amount >").message.contains("ends where a value"));
        assert!(
            refused("amount > 1 amount < 2")
                .message
                .contains("after a whole condition")
        );
        assert!(refused("(amount > 1").fix.contains(")"));
        assert!(refused("reason in ['a', 1]").message.contains("mixes"));
        assert!(refused("reason in ['a'").message.contains("never closed"));
        assert!(
            refused("reason not == 'a'")
                .message
                .contains("followed by `in`")
        );
        assert!(refused("'open").message.contains("never closed"));
        assert!(refused("amount > 1..2").message.contains("not a number"));
        assert!(refused("amount > other").fix.contains("another argument"));
        assert!(refused("amount ~ 1").message.contains("can't appear"));
        assert!(refused("").message.contains("argument's name"));
        assert!(refused("and > 1").message.contains("argument's name"));
    }

    #[test]
    fn hostile_sizes_are_bounded() {
        let deep = format!("{}a == 1{}", "(".repeat(100), ")".repeat(100));
        assert!(refused(&deep).message.contains("nest at most"));
        let nots = format!("{}a == 1", "not ".repeat(100));
        assert!(refused(&nots).message.contains("nest at most"));
        let long = format!("a in [{}]", vec!["1"; 1_001].join(","));
        assert!(refused(&long).message.contains("a list holds at most"));
        let huge = "a".repeat(CONDITION_LENGTH_MAX + 1);
        assert!(refused(&huge).message.contains("at most"));
        let list = format!(
            "a in [{}]",
            (0..CONDITION_LIST_MAX)
                .map(|n| n.to_string())
                .collect::<Vec<_>>()
                .join(",")
        );
        assert!(Condition::parse(&list).is_ok());
    }

    #[test]
    fn the_text_is_kept_for_messages() {
        let condition = Condition::parse("amount > 100.00").unwrap();
        assert_eq!(condition.to_string(), "amount > 100.00");
        assert_eq!(condition.text(), "amount > 100.00");
    }
}
