//! Strict Jev mode's request rules where Jev's contract asks for more than upstream's strict
//! mode gives: a request asks at least one question, and a `noul` may leave out its
//! `instructions` when its criteria say what is asked.

use pyjson::{Object, Value};

use super::RequestError;

/// Applies Jev's rules to a request's questions, before the questions are checked (step 16).
///
/// A `noul` without `instructions` (absent or `null`) whose `criteria` hold a non-null
/// description reads its criteria as its instructions, the way structured instructions are
/// read (as JSON text); the model sees the statement it is asked to judge in both places. Any
/// other question is left to upstream's checks.
pub fn apply(questions: &mut Object) -> Result<(), RequestError> {
    if questions.is_empty() {
        return Err(RequestError::NoQuestions);
    }
    let ids: Vec<String> = questions.keys().map(str::to_owned).collect();
    for id in ids {
        let Some(Value::Object(def)) = questions.get_mut(&id) else {
            continue;
        };
        let is_noul = matches!(def.get("type"), Some(Value::Str(t)) if t == "noul");
        let has_instructions = def.get("instructions").is_some_and(|v| !v.is_null());
        if !is_noul || has_instructions {
            continue;
        }
        let described = match def.get("criteria") {
            Some(Value::Object(c)) => c.values().any(|v| !v.is_null()),
            _ => false,
        };
        if described {
            if let Some(criteria) = def.get("criteria").cloned() {
                def.insert("instructions".to_owned(), criteria);
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn object(text: &str) -> Object {
        match pyjson::loads(text.as_bytes()).map(|p| p.value) {
            Ok(Value::Object(o)) => o,
            other => panic!("{other:?}"),
        }
    }

    fn text(o: &Object) -> String {
        pyjson::dumps(&Value::Object(o.clone()), pyjson::Style::Compact).expect("finite")
    }

    #[test]
    fn a_noul_without_instructions_reads_its_criteria() {
        let mut q = object(
            r#"{"t":{"type":"noul","criteria":{"true":"A threat","false":null}},
                "n":{"type":"noul","instructions":null,"criteria":{"true":"x"}},
                "k":{"type":"noul","instructions":"Kept?","criteria":{"true":"y"}},
                "e":{"type":"noul"},
                "c":{"type":"choice","criteria":["a","b"]}}"#,
        );
        apply(&mut q).expect("questions");
        assert_eq!(
            text(&q),
            r#"{"t":{"type":"noul","criteria":{"true":"A threat","false":null},"instructions":{"true":"A threat","false":null}},"n":{"type":"noul","instructions":{"true":"x"},"criteria":{"true":"x"}},"k":{"type":"noul","instructions":"Kept?","criteria":{"true":"y"}},"e":{"type":"noul"},"c":{"type":"choice","criteria":["a","b"]}}"#
        );
    }

    #[test]
    fn no_questions_is_refused() {
        assert_eq!(apply(&mut Object::new()), Err(RequestError::NoQuestions));
    }
}
