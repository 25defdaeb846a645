//! The value model of a parsed JSON document as CPython holds it after `json.loads`: `None`,
//! `bool`, `int` of any size, `float`, `str`, `list` and `dict` (insertion-ordered, with
//! Python's rules for duplicate keys), plus Python `==` on those values.

use std::collections::HashMap;
use std::fmt;

/// A JSON value with Python's types.
///
/// The derived `PartialEq` is structural (object order matters, `NaN != NaN`, `1 != 1.0`); use
/// [`py_equal`] for Python's `==`.
///
/// Values coming out of [`super::loads`] can be nested up to the parser's depth limit
/// (10 000 by default), deeper than a derived (recursive) `Clone` or `PartialEq` fits in a
/// thread's 2 MiB stack: a request's clone of such a value aborted the process. So both are
/// written as loops here, as is everything else in this module. Dropping such a value still
/// recurses once per level (a few dozen bytes of stack each); callers that walk values
/// themselves should do so iteratively too.
#[derive(Debug)]
pub enum Value {
    Null,
    Bool(bool),
    Int(Int),
    Float(f64),
    Str(String),
    Array(Vec<Value>),
    Object(Object),
}

impl Value {
    /// Python's type name (`type(v).__name__`), handy for error messages.
    pub fn type_name(&self) -> &'static str {
        match self {
            Value::Null => "NoneType",
            Value::Bool(_) => "bool",
            Value::Int(_) => "int",
            Value::Float(_) => "float",
            Value::Str(_) => "str",
            Value::Array(_) => "list",
            Value::Object(_) => "dict",
        }
    }

    pub fn is_null(&self) -> bool {
        matches!(self, Value::Null)
    }

    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::Str(s) => Some(s),
            _ => None,
        }
    }

    pub fn as_array(&self) -> Option<&[Value]> {
        match self {
            Value::Array(items) => Some(items),
            _ => None,
        }
    }

    pub fn as_object(&self) -> Option<&Object> {
        match self {
            Value::Object(o) => Some(o),
            _ => None,
        }
    }

    pub fn as_bool(&self) -> Option<bool> {
        match self {
            Value::Bool(b) => Some(*b),
            _ => None,
        }
    }

    /// `isinstance(v, (int, float))` and not a bool: the value as a float, the way Python's
    /// `float(v)` converts it (`None` for an int too large for a float, where Python raises
    /// `OverflowError`).
    pub fn as_number_f64(&self) -> Option<f64> {
        match self {
            Value::Int(i) => i.to_f64(),
            Value::Float(x) => Some(*x),
            _ => None,
        }
    }
}

/// A container being copied by [`Value::clone`]: its source and the copies of the children
/// done so far.
enum CloneFrame<'a> {
    Array(std::slice::Iter<'a, Value>, Vec<Value>),
    Object(&'a Object, Vec<(String, Value)>),
}

/// What [`CloneFrame::start`] makes of a value.
enum Copying<'a> {
    Container(CloneFrame<'a>),
    Done(Value),
}

impl<'a> CloneFrame<'a> {
    /// Starts copying `v`, or copies it whole when it holds no container.
    fn start(v: &'a Value) -> Copying<'a> {
        let done = match v {
            Value::Array(items) => {
                let frame = CloneFrame::Array(items.iter(), Vec::with_capacity(items.len()));
                return Copying::Container(frame);
            }
            Value::Object(o) => {
                return Copying::Container(CloneFrame::Object(o, Vec::with_capacity(o.len())))
            }
            Value::Null => Value::Null,
            Value::Bool(b) => Value::Bool(*b),
            Value::Int(i) => Value::Int(i.clone()),
            Value::Float(x) => Value::Float(*x),
            Value::Str(s) => Value::Str(s.clone()),
        };
        Copying::Done(done)
    }

    fn next_child(&mut self) -> Option<&'a Value> {
        match self {
            CloneFrame::Array(src, _) => src.next(),
            CloneFrame::Object(src, done) => src.entries.get(done.len()).map(|(_, v)| v),
        }
    }

    fn push(&mut self, child: Value) {
        match self {
            CloneFrame::Array(_, done) => done.push(child),
            CloneFrame::Object(src, done) => {
                let key = src.entries[done.len()].0.clone();
                done.push((key, child));
            }
        }
    }

    fn finish(self) -> Value {
        match self {
            CloneFrame::Array(_, done) => Value::Array(done),
            CloneFrame::Object(src, entries) => Value::Object(Object {
                entries,
                index: src.index.clone(),
            }),
        }
    }
}

impl Clone for Value {
    fn clone(&self) -> Value {
        let mut stack = match CloneFrame::start(self) {
            Copying::Container(frame) => vec![frame],
            Copying::Done(scalar) => return scalar,
        };
        loop {
            let top = stack.last_mut().expect("a container is being copied");
            match top.next_child() {
                Some(child) => match CloneFrame::start(child) {
                    Copying::Container(frame) => stack.push(frame),
                    Copying::Done(scalar) => top.push(scalar),
                },
                None => {
                    let done = stack.pop().expect("a container is being copied").finish();
                    match stack.last_mut() {
                        Some(parent) => parent.push(done),
                        None => return done,
                    }
                }
            }
        }
    }
}

impl PartialEq for Value {
    /// Structural, as a derived one would be (object order matters, `NaN != NaN`,
    /// `1 != 1.0`), without recursion.
    fn eq(&self, other: &Value) -> bool {
        let mut pending: Vec<(&Value, &Value)> = vec![(self, other)];
        while let Some((a, b)) = pending.pop() {
            let same = match (a, b) {
                (Value::Array(xs), Value::Array(ys)) => {
                    pending.extend(xs.iter().zip(ys.iter()));
                    xs.len() == ys.len()
                }
                (Value::Object(xs), Value::Object(ys)) => {
                    xs.len() == ys.len()
                        && xs
                            .entries
                            .iter()
                            .zip(&ys.entries)
                            .all(|((kx, x), (ky, y))| {
                                pending.push((x, y));
                                kx == ky
                            })
                }
                (Value::Null, Value::Null) => true,
                (Value::Bool(x), Value::Bool(y)) => x == y,
                (Value::Int(x), Value::Int(y)) => x == y,
                (Value::Float(x), Value::Float(y)) => x == y,
                (Value::Str(x), Value::Str(y)) => x == y,
                _ => false,
            };
            if !same {
                return false;
            }
        }
        true
    }
}

impl From<bool> for Value {
    fn from(b: bool) -> Value {
        Value::Bool(b)
    }
}

impl From<i64> for Value {
    fn from(i: i64) -> Value {
        Value::Int(Int::from(i))
    }
}

impl From<f64> for Value {
    fn from(x: f64) -> Value {
        Value::Float(x)
    }
}

impl From<&str> for Value {
    fn from(s: &str) -> Value {
        Value::Str(s.to_owned())
    }
}

impl From<String> for Value {
    fn from(s: String) -> Value {
        Value::Str(s)
    }
}

impl From<Vec<Value>> for Value {
    fn from(items: Vec<Value>) -> Value {
        Value::Array(items)
    }
}

impl From<Object> for Value {
    fn from(o: Object) -> Value {
        Value::Object(o)
    }
}

/// A Python `int` of any size.
///
/// Values that fit an `i64` are stored as one; anything larger keeps its canonical decimal
/// text (optional `-`, no leading zeros). The two forms never overlap, so equality of the
/// representation is equality of the number. JSON's `-0` is the int `0` (Python ints have
/// no negative zero).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Int(IntRepr);

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum IntRepr {
    Small(i64),
    /// Canonical decimal text of a value outside the `i64` range.
    Big(Box<str>),
}

impl Int {
    /// Parses canonical-or-not decimal integer text (`-?[0-9]+`; leading zeros allowed and
    /// dropped). `None` for anything else. No digit limit is applied here; the JSON parser
    /// applies CPython's 4300-digit limit itself.
    pub fn from_decimal(text: &str) -> Option<Int> {
        let (negative, digits) = match text.strip_prefix('-') {
            Some(rest) => (true, rest),
            None => (false, text),
        };
        if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        if let Ok(small) = text.parse::<i64>() {
            return Some(Int(IntRepr::Small(small)));
        }
        let digits = digits.trim_start_matches('0');
        // Out of i64 range, so there is at least one significant digit and the sign matters.
        let mut canonical = String::with_capacity(digits.len() + 1);
        if negative {
            canonical.push('-');
        }
        canonical.push_str(digits);
        Some(Int(IntRepr::Big(canonical.into_boxed_str())))
    }

    /// The value, if it fits an `i64`.
    pub fn as_i64(&self) -> Option<i64> {
        match &self.0 {
            IntRepr::Small(i) => Some(*i),
            IntRepr::Big(_) => None,
        }
    }

    pub fn is_negative(&self) -> bool {
        match &self.0 {
            IntRepr::Small(i) => *i < 0,
            IntRepr::Big(s) => s.starts_with('-'),
        }
    }

    /// Python's `float(i)`: correctly rounded (half to even); `None` where Python raises
    /// `OverflowError: int too large to convert to float`.
    pub fn to_f64(&self) -> Option<f64> {
        match &self.0 {
            // `as` rounds to nearest, ties to even, like CPython's int -> float.
            IntRepr::Small(i) => Some(*i as f64),
            // Rust's float parser is correctly rounded; it yields inf exactly where the
            // correctly rounded value overflows, which is where Python raises.
            IntRepr::Big(s) => s.parse::<f64>().ok().filter(|x| x.is_finite()),
        }
    }

    /// Python `int == float`, exact (no rounding of either side): `2**53 + 1 != 2.0**53`,
    /// `10**400 != inf`.
    pub fn equals_f64(&self, x: f64) -> bool {
        if !x.is_finite() || x.fract() != 0.0 {
            return false;
        }
        match &self.0 {
            IntRepr::Small(i) => {
                // -2^63 <= x < 2^63 is exactly the range where `x as i64` is exact.
                const TWO_63: f64 = 9_223_372_036_854_775_808.0;
                (-TWO_63..TWO_63).contains(&x) && x as i64 == *i
            }
            // An integral float prints as its exact integer value with `{:.0}`; a big int is
            // outside the i64 range, so zero (and its sign) never reaches this arm.
            IntRepr::Big(s) => format!("{x:.0}") == **s,
        }
    }
}

impl From<i64> for Int {
    fn from(i: i64) -> Int {
        Int(IntRepr::Small(i))
    }
}

impl fmt::Display for Int {
    /// Python's `str(i)` / `repr(i)`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.0 {
            IntRepr::Small(i) => write!(f, "{i}"),
            IntRepr::Big(s) => f.write_str(s),
        }
    }
}

/// Objects up to this many keys are searched linearly; larger ones get a hash index, so that
/// parsing a body with many keys stays linear.
const INDEX_THRESHOLD: usize = 16;

/// A JSON object as a Python `dict`: insertion order, and inserting an existing key replaces
/// its value while the key keeps its first position (`{"a":1,"b":2,"a":3}` is
/// `{'a': 3, 'b': 2}`).
#[derive(Clone, Default)]
pub struct Object {
    entries: Vec<(String, Value)>,
    /// Key -> position in `entries`, built once the object outgrows [`INDEX_THRESHOLD`].
    /// `HashMap`'s randomly keyed SipHash keeps adversarial keys from degrading it.
    index: Option<HashMap<String, usize>>,
}

impl Object {
    pub fn new() -> Object {
        Object::default()
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    fn position(&self, key: &str) -> Option<usize> {
        match &self.index {
            Some(index) => index.get(key).copied(),
            None => self.entries.iter().position(|(k, _)| k == key),
        }
    }

    pub fn get(&self, key: &str) -> Option<&Value> {
        self.position(key).map(|i| &self.entries[i].1)
    }

    pub fn get_mut(&mut self, key: &str) -> Option<&mut Value> {
        self.position(key).map(move |i| &mut self.entries[i].1)
    }

    pub fn contains_key(&self, key: &str) -> bool {
        self.position(key).is_some()
    }

    /// Python `d[key] = value`: returns the replaced value, if any.
    pub fn insert(&mut self, key: String, value: Value) -> Option<Value> {
        if let Some(i) = self.position(&key) {
            return Some(std::mem::replace(&mut self.entries[i].1, value));
        }
        let position = self.entries.len();
        match &mut self.index {
            Some(index) => {
                index.insert(key.clone(), position);
            }
            None if position >= INDEX_THRESHOLD => {
                let mut index: HashMap<String, usize> = self
                    .entries
                    .iter()
                    .enumerate()
                    .map(|(i, (k, _))| (k.clone(), i))
                    .collect();
                index.insert(key.clone(), position);
                self.index = Some(index);
            }
            None => {}
        }
        self.entries.push((key, value));
        None
    }

    /// Entries in insertion order.
    pub fn iter(&self) -> Iter<'_> {
        Iter(self.entries.iter())
    }

    pub fn keys(&self) -> impl DoubleEndedIterator<Item = &str> + ExactSizeIterator {
        self.entries.iter().map(|(k, _)| k.as_str())
    }

    pub fn values(&self) -> impl DoubleEndedIterator<Item = &Value> + ExactSizeIterator {
        self.entries.iter().map(|(_, v)| v)
    }
}

impl PartialEq for Object {
    /// Structural: same entries in the same order.
    fn eq(&self, other: &Object) -> bool {
        self.entries == other.entries
    }
}

impl fmt::Debug for Object {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map().entries(self.iter()).finish()
    }
}

impl FromIterator<(String, Value)> for Object {
    /// Like Python's `dict(pairs)`: later duplicates replace values in place.
    fn from_iter<I: IntoIterator<Item = (String, Value)>>(pairs: I) -> Object {
        let mut o = Object::new();
        for (k, v) in pairs {
            o.insert(k, v);
        }
        o
    }
}

impl<'a> IntoIterator for &'a Object {
    type Item = (&'a str, &'a Value);
    type IntoIter = Iter<'a>;
    fn into_iter(self) -> Iter<'a> {
        self.iter()
    }
}

impl IntoIterator for Object {
    type Item = (String, Value);
    type IntoIter = std::vec::IntoIter<(String, Value)>;
    fn into_iter(self) -> Self::IntoIter {
        self.entries.into_iter()
    }
}

/// Iterator over an [`Object`]'s entries in insertion order.
#[derive(Clone, Debug)]
pub struct Iter<'a>(std::slice::Iter<'a, (String, Value)>);

impl<'a> Iterator for Iter<'a> {
    type Item = (&'a str, &'a Value);
    fn next(&mut self) -> Option<Self::Item> {
        self.0.next().map(|(k, v)| (k.as_str(), v))
    }
    fn size_hint(&self) -> (usize, Option<usize>) {
        self.0.size_hint()
    }
}

impl DoubleEndedIterator for Iter<'_> {
    fn next_back(&mut self) -> Option<Self::Item> {
        self.0.next_back().map(|(k, v)| (k.as_str(), v))
    }
}

impl ExactSizeIterator for Iter<'_> {}

/// Python `a == b` for values produced by `json.loads`.
///
/// Numbers compare by value across `bool`, `int` and `float` (`True == 1 == 1.0`,
/// `0 == False == -0.0`), exactly (`2**53 + 1 != 2.0**53`); `NaN != NaN`; strings equal only
/// strings. Lists and dicts compare element-wise (dicts regardless of order) with the
/// `x is y or x == y` shortcut CPython uses inside containers; `json.loads` returns one shared
/// float object for every `NaN` literal, so NaNs *inside* containers are equal
/// (`json.loads('[NaN]') == json.loads('[NaN]')` is `True`).
pub fn py_equal(a: &Value, b: &Value) -> bool {
    if let (Value::Float(x), Value::Float(y)) = (a, b) {
        // The only case where the container shortcut and `==` differ is NaN; top-level `==`
        // has no identity shortcut.
        return x == y;
    }
    py_same_or_equal(a, b)
}

/// Python `a is b or a == b` for values from `json.loads`, the comparison behind `in`,
/// `list.index`, `list.count` and container equality. It differs from [`py_equal`] only in
/// treating NaN as equal to NaN (every JSON `NaN` is the same Python object).
pub fn py_same_or_equal(a: &Value, b: &Value) -> bool {
    // Iterative so that deeply nested values cannot exhaust the stack.
    let mut pending: Vec<(&Value, &Value)> = vec![(a, b)];
    while let Some((a, b)) = pending.pop() {
        match (a, b) {
            (Value::Array(xs), Value::Array(ys)) => {
                if xs.len() != ys.len() {
                    return false;
                }
                pending.extend(xs.iter().zip(ys.iter()));
            }
            (Value::Object(xs), Value::Object(ys)) => {
                if xs.len() != ys.len() {
                    return false;
                }
                for (k, x) in xs {
                    match ys.get(k) {
                        Some(y) => pending.push((x, y)),
                        None => return false,
                    }
                }
            }
            (Value::Float(x), Value::Float(y)) => {
                if !(x == y || (x.is_nan() && y.is_nan())) {
                    return false;
                }
            }
            _ => {
                if !scalar_equal(a, b) {
                    return false;
                }
            }
        }
    }
    true
}

/// Python `==` on two values that are not both containers.
fn scalar_equal(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Null, Value::Null) => true,
        (Value::Str(x), Value::Str(y)) => x == y,
        _ => match (Number::of(a), Number::of(b)) {
            (Some(x), Some(y)) => x.equals(&y),
            _ => false,
        },
    }
}

/// The numeric tower as Python compares it: `bool` is an `int`.
enum Number<'a> {
    Int(std::borrow::Cow<'a, Int>),
    Float(f64),
}

impl<'a> Number<'a> {
    fn of(v: &'a Value) -> Option<Number<'a>> {
        match v {
            Value::Bool(b) => Some(Number::Int(std::borrow::Cow::Owned(Int::from(i64::from(
                *b,
            ))))),
            Value::Int(i) => Some(Number::Int(std::borrow::Cow::Borrowed(i))),
            Value::Float(x) => Some(Number::Float(*x)),
            _ => None,
        }
    }

    fn equals(&self, other: &Number<'_>) -> bool {
        match (self, other) {
            (Number::Int(a), Number::Int(b)) => a == b,
            (Number::Int(i), Number::Float(x)) | (Number::Float(x), Number::Int(i)) => {
                i.equals_f64(*x)
            }
            (Number::Float(x), Number::Float(y)) => x == y,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn int(s: &str) -> Value {
        Value::Int(Int::from_decimal(s).expect("valid int"))
    }

    /// Copies and compares values nested as deep as the parser allows on a thread with the
    /// stack that spawned threads (the engine's, tokio's) get, where the derived forms
    /// overflowed it and aborted the process.
    #[test]
    fn deep_values_clone_and_compare_without_recursion() {
        let depth = crate::DEFAULT_MAX_DEPTH;
        // `levels` wrappers around `inner`, `per_level` containers each.
        let nested = |open: &str, inner: &str, close: &str, per_level: usize| {
            let levels = (depth - 1) / per_level;
            format!("{}{inner}{}", open.repeat(levels), close.repeat(levels))
        };
        let texts = [
            (nested("[", "[1]", "]", 1), nested("[", "[2]", "]", 1)),
            (
                nested("{\"a\":", "{\"b\":1}", "}", 1),
                nested("{\"a\":", "{\"c\":1}", "}", 1),
            ),
            (
                nested("[{\"k\":", "[]", "}]", 2),
                nested("[{\"k\":", "{}", "}]", 2),
            ),
        ];
        let worker = std::thread::Builder::new()
            .stack_size(2 << 20)
            .spawn(move || {
                for (text, other_text) in &texts {
                    let v = crate::loads(text.as_bytes())
                        .expect("within the depth limit")
                        .value;
                    let other = crate::loads(other_text.as_bytes())
                        .expect("within the limit")
                        .value;
                    let copy = v.clone();
                    assert!(copy == v);
                    assert!(copy != other);
                    assert_eq!(crate::py_repr(&copy), crate::py_repr(&v));
                }
            })
            .expect("spawn");
        worker.join().expect("no overflow, no panic");
    }

    #[test]
    fn clone_keeps_order_duplicates_and_index() {
        let mut text = String::from("{");
        for i in 0..40 {
            text.push_str(&format!("\"k{i}\": [{i}, {{\"x\": {i}.5}}], "));
        }
        text.push_str("\"k3\": null, \"big\": 123456789012345678901234567890}");
        let v = crate::loads(text.as_bytes()).expect("valid").value;
        let copy = v.clone();
        assert!(copy == v);
        let o = copy.as_object().expect("an object");
        assert_eq!(o.len(), 41);
        assert_eq!(o.get("k3"), Some(&Value::Null));
        assert_eq!(o.keys().nth(3), Some("k3"));
        assert_eq!(
            o.get("k39").map(crate::py_repr).as_deref(),
            Some("[39, {'x': 39.5}]")
        );
        assert_eq!(crate::py_repr(&copy), crate::py_repr(&v));
        // Structural equality, as the derived one: 1 is not 1.0, NaN is not NaN, order counts.
        let parse = |t: &str| crate::loads(t.as_bytes()).expect("valid").value;
        assert!(parse("[1]") != parse("[1.0]"));
        let nan = || Value::Array(vec![Value::Float(f64::NAN)]);
        assert!(nan() != nan());
        assert!(parse(r#"{"a":1,"b":2}"#) != parse(r#"{"b":2,"a":1}"#));
        assert!(parse(r#"{"a":1,"b":2}"#) != parse(r#"{"a":1,"c":2}"#));
        assert!(parse("[1,[2]]") != parse("[1,[2],3]"));
    }

    #[test]
    fn int_forms() {
        assert_eq!(Int::from_decimal("-0").and_then(|i| i.as_i64()), Some(0));
        assert_eq!(
            Int::from_decimal("9223372036854775807").and_then(|i| i.as_i64()),
            Some(i64::MAX)
        );
        let big = Int::from_decimal("9223372036854775808").expect("valid");
        assert_eq!(big.as_i64(), None);
        assert_eq!(big.to_string(), "9223372036854775808");
        assert_eq!(
            Int::from_decimal("-0009223372036854775809")
                .map(|i| i.to_string())
                .as_deref(),
            Some("-9223372036854775809")
        );
        assert!(Int::from_decimal("").is_none());
        assert!(Int::from_decimal("-").is_none());
        assert!(Int::from_decimal("1.0").is_none());
        assert!(Int::from_decimal("+1").is_none());
    }

    #[test]
    fn int_to_f64() {
        // float(2**1024 - 2**970 - 1) == 1.7976931348623157e+308; float(2**1024 - 2**970) raises
        let below = "179769313486231580793728971405303415079934132710037826936173778980444968292764750946649017977587207096330286416692887910946555547851940402630657488671505820681908902000708383676273854845817711531764475730270069855571366959622842914819860834936475292719074168444365510704342711559699508093042880177904174497791";
        let tie = "179769313486231580793728971405303415079934132710037826936173778980444968292764750946649017977587207096330286416692887910946555547851940402630657488671505820681908902000708383676273854845817711531764475730270069855571366959622842914819860834936475292719074168444365510704342711559699508093042880177904174497792";
        assert_eq!(
            Int::from_decimal(below).and_then(|i| i.to_f64()),
            Some(f64::MAX)
        );
        assert_eq!(Int::from_decimal(tie).and_then(|i| i.to_f64()), None);
        // float(2**63 + 1) == 9.223372036854776e+18
        assert_eq!(
            Int::from_decimal("9223372036854775809").and_then(|i| i.to_f64()),
            Some(9.223372036854776e18)
        );
    }

    #[test]
    fn object_duplicate_keys_keep_first_position() {
        // json.loads('{"a":1,"b":2,"a":3}') == {'a': 3, 'b': 2}, keys in order a, b
        let o: Object = [("a", 1), ("b", 2), ("a", 3)]
            .into_iter()
            .map(|(k, v)| (k.to_owned(), Value::from(v)))
            .collect();
        assert_eq!(o.keys().collect::<Vec<_>>(), ["a", "b"]);
        assert_eq!(o.get("a"), Some(&Value::from(3)));
        assert!(o.contains_key("b") && !o.contains_key("c"));
    }

    #[test]
    fn object_index_after_threshold() {
        let mut o = Object::new();
        for i in 0..100 {
            assert!(o.insert(format!("k{i}"), Value::from(i)).is_none());
        }
        assert_eq!(o.insert("k5".into(), Value::Null), Some(Value::from(5)));
        assert_eq!(o.len(), 100);
        assert_eq!(o.keys().nth(5), Some("k5"));
        assert_eq!(o.get("k5"), Some(&Value::Null));
        assert_eq!(o.get("k99"), Some(&Value::from(99)));
        assert_eq!(o.get("k100"), None);
    }

    #[test]
    fn python_equality() {
        let nan = Value::Float(f64::NAN);
        let cases: &[(Value, Value, bool)] = &[
            // True == 1 == 1.0, 0 == False == -0.0
            (Value::Bool(true), Value::from(1), true),
            (Value::Bool(true), Value::from(1.0), true),
            (Value::from(0), Value::Bool(false), true),
            (Value::Bool(false), Value::from(-0.0), true),
            (Value::from(1), Value::from(1.5), false),
            // "1" == 1 -> False; None == False -> False
            (Value::from("1"), Value::from(1), false),
            (Value::Null, Value::Bool(false), false),
            (Value::Null, Value::Null, true),
            // float('nan') == float('nan') -> False
            (nan.clone(), nan.clone(), false),
            // 2**53 + 1 == 2.0**53 -> False; 2**53 == 2.0**53 -> True
            (
                int("9007199254740993"),
                Value::from(9007199254740992.0),
                false,
            ),
            (
                int("9007199254740992"),
                Value::from(9007199254740992.0),
                true,
            ),
            // 2**64 == 2.0**64 -> True; 10**400 == float('inf') -> False
            (
                int("18446744073709551616"),
                Value::from(18446744073709551616.0),
                true,
            ),
            (
                int("18446744073709551617"),
                Value::from(18446744073709551616.0),
                false,
            ),
            (
                int(&format!("1{}", "0".repeat(400))),
                Value::from(f64::INFINITY),
                false,
            ),
            // 2**63 == -(2**63) and friends: sign matters
            (
                int("-9223372036854775808"),
                Value::from(-9223372036854775808.0),
                true,
            ),
            (
                int("9223372036854775808"),
                Value::from(9223372036854775808.0),
                true,
            ),
            (
                int("-9223372036854775809"),
                Value::from(-9223372036854775808.0),
                false,
            ),
            // json.loads('[NaN]') == json.loads('[NaN]') -> True (one shared NaN object)
            (
                Value::Array(vec![nan.clone()]),
                Value::Array(vec![nan.clone()]),
                true,
            ),
            // [1, 2] == [1.0, True + 1] -> True; [1] == [1, 2] -> False
            (
                Value::Array(vec![Value::from(1), Value::from(2)]),
                Value::Array(vec![Value::from(1.0), Value::from(2.0)]),
                true,
            ),
            (
                Value::Array(vec![Value::from(1)]),
                Value::Array(vec![Value::from(1), Value::from(2)]),
                false,
            ),
        ];
        for (a, b, want) in cases {
            assert_eq!(py_equal(a, b), *want, "{a:?} == {b:?}");
            assert_eq!(py_equal(b, a), *want, "{b:?} == {a:?}");
        }
        assert!(py_same_or_equal(&nan, &nan));
        // {'a': 1, 'b': 2} == {'b': 2, 'a': 1.0} -> True
        let x: Object = vec![
            ("a".to_owned(), Value::from(1)),
            ("b".to_owned(), Value::from(2)),
        ]
        .into_iter()
        .collect();
        let y: Object = vec![
            ("b".to_owned(), Value::from(2)),
            ("a".to_owned(), Value::from(1.0)),
        ]
        .into_iter()
        .collect();
        assert!(py_equal(&Value::Object(x.clone()), &Value::Object(y)));
        let z: Object = vec![
            ("a".to_owned(), Value::from(1)),
            ("c".to_owned(), Value::from(2)),
        ]
        .into_iter()
        .collect();
        assert!(!py_equal(&Value::Object(x), &Value::Object(z)));
    }
}
