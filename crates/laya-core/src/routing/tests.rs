//! Spec api.md §4.5, §4.6, §6.6 and §13 cases 65-71, 77-79, 85-86, 122-124.

use super::*;
use pyjson::{dumps, loads, Style};

const NAMES: &str = "['english', 'multilingual', 'typed-decisions']";
const ALIASES: &str = "['decisions', 'default', 'en', 'laya', 'laya-multilingual', 'laya-typed-decisions', 'ml', 'multi', 'typed', 'typed_decisions']";
const CS_IDS: [&str; 5] = ["action", "category", "churn_risk", "needs_human", "urgency"];

fn v(json: &str) -> Value {
    loads(json.as_bytes()).expect("test JSON").value
}

fn s(text: &str) -> Value {
    Value::Str(text.to_string())
}

fn cfg() -> RoutingConfig {
    RoutingConfig::single_source("tiny")
}

fn auto(state: &Value, ids: &[&str]) -> Routing {
    route(state, ids, None, None, None, None, &cfg()).expect("routes")
}

#[test]
fn case_122_han_state() {
    let r = auto(&s("我的账户被扣了两次费用，请退款"), &["q"]);
    assert_eq!(r.model, Checkpoint::multilingual());
    assert_eq!(
        r.reason,
        "non-Latin script (han, 100% of letters); the English checkpoint cannot read it"
    );
    assert_eq!(r.detection.as_ref().map(|d| d.script), Some("han"));
}

#[test]
fn case_123_workflow_reported_without_auto_task() {
    let r = auto(&s("I was charged twice"), &CS_IDS);
    assert_eq!(r.model, Checkpoint::english());
    assert_eq!(r.reason, "English Latin text");
    assert_eq!(r.workflow, Some("customer_service"));
    assert!(r.detection.is_some());
    assert_eq!(
        r.to_json(),
        "{\"model\":\"english\",\"repo\":\"tiny\",\"reason\":\"English Latin text\",\"detection\":{\"script\":\"latin\",\
         \"script_profile\":{\"latin\":1.0},\"language\":\"en\",\"is_english\":true,\"language_undecided\":false,\
         \"diacritic_rate\":0.0,\"non_latin_fraction\":0.0,\"mixed_segment\":null},\"workflow\":\"customer_service\"}"
    );
    // The id set must match exactly, in any order.
    let mut ids = CS_IDS.to_vec();
    ids.reverse();
    assert_eq!(match_workflow(&ids), Some("customer_service"));
    assert_eq!(match_workflow(&CS_IDS[..4]), None);
    assert_eq!(
        match_workflow(&[
            "action",
            "category",
            "churn_risk",
            "needs_human",
            "urgency",
            "x"
        ]),
        None
    );
}

#[test]
fn case_124_auto_task() {
    let c = RoutingConfig {
        auto_task: true,
        ..cfg()
    };
    let r = route(
        &s("I was charged twice"),
        &CS_IDS,
        None,
        None,
        None,
        None,
        &c,
    )
    .expect("routes");
    assert_eq!(r.model, Checkpoint::typed_decisions());
    assert_eq!(
        r.reason,
        "question ids match the 'customer_service' typed-decisions workflow"
    );
    assert_eq!((r.detection, r.workflow), (None, Some("customer_service")));
    // lang comes after the workflow; task and model come before it.
    let r = route(&s("x"), &CS_IDS, None, None, Some("de"), None, &c).expect("routes");
    assert_eq!(r.model, Checkpoint::typed_decisions());
    let r = route(&s("x"), &CS_IDS, None, Some(&s("en")), None, None, &c).expect("routes");
    assert_eq!((r.model, r.workflow), (Checkpoint::english(), None));
    let r = route(
        &s("x"),
        &CS_IDS,
        Some(&Checkpoint::multilingual()),
        None,
        None,
        None,
        &c,
    )
    .expect("routes");
    assert_eq!((r.model, r.workflow), (Checkpoint::multilingual(), None));
}

#[test]
fn model_field() {
    let ok = |json: &str| resolve_model_field(&v(json), &cfg()).expect("no 422");
    // Falsy values and client model ids auto-route.
    for json in [
        "null",
        "\"\"",
        "0",
        "0.0",
        "false",
        "[]",
        "{}",
        "\"jev-1\"",
        "\"auto\"",
        "5",
        "true",
        "\" \"",
    ] {
        assert_eq!(ok(json), None, "{json}");
    }
    // The bundle id does not pin English.
    assert_eq!(ok("\"convaiinnovations/laya\""), None);
    assert_eq!(ok("\" ConvAIInnovations/LAYA \""), None);
    assert_eq!(
        ok("\"ConvAIInnovations/Laya-Typed-Decisions\""),
        Some(Checkpoint::typed_decisions())
    );
    assert_eq!(
        ok("\"convaiinnovations/laya-multilingual\""),
        Some(Checkpoint::multilingual())
    );
    assert_eq!(ok("\"ml\""), Some(Checkpoint::multilingual()));
    assert_eq!(ok("\"default\""), Some(Checkpoint::english()));
    assert_eq!(
        ok("\" Typed_Decisions\\n\""),
        Some(Checkpoint::typed_decisions())
    );
    assert_eq!(ok("\"ENGLISH\""), Some(Checkpoint::english()));
    for (alias, c) in Checkpoint::ALIASES {
        assert_eq!(Checkpoint::from_name(alias), Some(Checkpoint::new(c)));
        assert_eq!(cfg().resolve(alias), Some(Checkpoint::new(c)));
    }
    let err = |json: &str| resolve_model_field(&v(json), &cfg()).expect_err("422");
    let tail = format!(
        "; choose one of {NAMES} (or an alias: {ALIASES}), or omit model to let the router choose"
    );
    assert_eq!(
        err("\"org/repo\""),
        format!("unknown model 'org/repo'{tail}")
    );
    assert_eq!(
        err("\"org/repo\""),
        "unknown model 'org/repo'; choose one of ['english', 'multilingual', 'typed-decisions'] (or an alias: ['decisions', 'default', 'en', 'laya', 'laya-multilingual', 'laya-typed-decisions', 'ml', 'multi', 'typed', 'typed_decisions']), or omit model to let the router choose"
    );
    assert_eq!(err("\"./ckpt\""), format!("unknown model './ckpt'{tail}"));
    assert_eq!(err("\"~ckpt\""), format!("unknown model '~ckpt'{tail}"));
    assert_eq!(err("\"a\\\\b\""), format!("unknown model 'a\\\\b'{tail}"));
    assert_eq!(err("[\"a/b\"]"), format!("unknown model ['a/b']{tail}"));
}

#[test]
fn pinned_model_reason() {
    let r = route(
        &s("Mein Konto"),
        &["q"],
        Some(&Checkpoint::multilingual()),
        None,
        Some("en"),
        None,
        &cfg(),
    )
    .expect("routes");
    assert_eq!(r.reason, "explicit model='multilingual'");
    assert_eq!(
        r.to_json(),
        "{\"model\":\"multilingual\",\"repo\":\"tiny\",\"reason\":\"explicit model='multilingual'\",\"detection\":null,\"workflow\":null}"
    );
    // `default` pins english even for a German state (case 71).
    let pin = resolve_model_field(&s("default"), &cfg()).expect("no 422");
    let r = route(
        &s("Ich habe mein Passwort vergessen und kann mich nicht anmelden"),
        &["q"],
        pin.as_ref(),
        None,
        None,
        None,
        &cfg(),
    )
    .expect("routes");
    assert_eq!(r.model, Checkpoint::english());
}

#[test]
fn task_field() {
    let t = |task: &Value| route(&s("x"), &["q"], None, Some(task), None, None, &cfg());
    let r = t(&s("Typed-Decisions")).expect("routes");
    assert_eq!(
        (r.model, r.reason.as_str()),
        (
            Checkpoint::typed_decisions(),
            "explicit task='Typed-Decisions'"
        )
    );
    assert_eq!(
        t(&s("TYPED_decisions")).expect("routes").model,
        Checkpoint::typed_decisions()
    );
    assert_eq!(
        t(&s(" ml ")).expect("routes").reason,
        "explicit task=' ml '"
    );
    assert_eq!(
        t(&s("default")).expect("routes").model,
        Checkpoint::english()
    );
    let tail = format!("; choose one of {NAMES} (or an alias: {ALIASES})");
    assert_eq!(
        t(&v("5")).expect_err("422"),
        format!("unknown model 5{tail}")
    );
    assert_eq!(
        t(&s("")).expect_err("422"),
        format!("unknown model ''{tail}")
    );
    assert_eq!(
        t(&s("zz")).expect_err("422"),
        format!("unknown model 'zz'{tail}")
    );
    // `null` is absent.
    assert!(t(&Value::Null).expect("routes").detection.is_some());
}

#[test]
fn lang_and_lang_guess() {
    let en_state = s("I was charged twice for my plan this month");
    let de_state = s("Mein Konto wurde zweimal belastet, bitte erstatten Sie das Geld");
    let r = route(&en_state, &["q"], None, None, Some("de"), None, &cfg()).expect("routes");
    assert_eq!(
        r.to_json(),
        "{\"model\":\"multilingual\",\"repo\":\"tiny\",\"reason\":\"explicit lang='de'\",\"detection\":null,\"workflow\":null}"
    );
    let r = route(&de_state, &["q"], None, None, Some("EN-us"), None, &cfg()).expect("routes");
    assert_eq!(
        (r.model, r.reason.as_str()),
        (Checkpoint::english(), "explicit lang='EN-us'")
    );
    // Codes that name no language fall through to lang_guess, then detection.
    for code in [
        "", "  ", "C", "c.UTF-8", "POSIX", "und", "ZXX", "mul", "mul-Latn", ".utf8", "-x",
    ] {
        let r = route(&en_state, &["q"], None, None, Some(code), None, &cfg()).expect("routes");
        assert_eq!(r.reason, "English Latin text", "{code:?}");
        let r = route(
            &de_state,
            &["q"],
            None,
            None,
            Some(code),
            Some("en_US.UTF-8"),
            &cfg(),
        )
        .expect("routes");
        assert_eq!(
            r.reason, "lang_guess: the caller identified this as English text",
            "{code:?}"
        );
    }
    let r = route(&en_state, &["q"], None, None, None, Some("fr_FR"), &cfg()).expect("routes");
    assert_eq!(
        (r.model, r.reason.as_str()),
        (
            Checkpoint::multilingual(),
            "lang_guess: the caller identified this as non-English text"
        )
    );
    assert_eq!(english_from_code("english"), Some(true));
    assert_eq!(english_from_code("eng_GB"), Some(true));
    assert_eq!(english_from_code("enx"), Some(false));
    // The workflow is still reported on the lang branches.
    let r = route(&en_state, &CS_IDS, None, None, Some("de"), None, &cfg()).expect("routes");
    assert_eq!(r.workflow, Some("customer_service"));
}

#[test]
fn detection_reasons() {
    let r = auto(&v("12.5"), &["q"]);
    assert_eq!(
        (r.model, r.reason.as_str()),
        (
            Checkpoint::multilingual(),
            "no letters detected in state; using default (multilingual)"
        )
    );
    let c = RoutingConfig {
        default_model: Checkpoint::english(),
        ..cfg()
    };
    let r = route(&s("1234"), &["q"], None, None, None, None, &c).expect("routes");
    assert_eq!(
        r.reason,
        "no letters detected in state; using default (english)"
    );
    let r = auto(&s("Quero cancelar"), &["q"]);
    assert_eq!(
        r.reason,
        "Latin script, language not identified and no non-English letters; using default (multilingual)"
    );
    let r = auto(
        &s("Mein Konto wurde zweimal belastet, bitte erstatten Sie das Geld"),
        &["q"],
    );
    assert_eq!(
        r.reason,
        "Latin script but language looks like 'de', not English"
    );
    let r = auto(&s("Zażółć gęślą jaźń"), &["q"]);
    assert!(
        r.reason
            .starts_with("Latin script, language not identified but "),
        "{}",
        r.reason
    );
    let state = v(
        r#"{"agent": "Hello, thanks for contacting support. How can we help you with this order today?", "customer": "Ich habe die Rechnung nicht bekommen und ich will mein Geld"}"#,
    );
    let r = auto(&state, &["q"]);
    assert_eq!(
        r.reason,
        "Latin script, mostly English, but a line or field reads as 'de' ('Ich habe die Rechnung nicht bekommen und ich will mein Geld'); the English checkpoint cannot read it"
    );
}

#[test]
fn to_value_matches_write_json() {
    for state in [
        s("I was charged twice"),
        s("我的账户 order 88213"),
        v("[\"hola\", {\"a\": \"Wo ist mein Paket? Ich warte seit Tagen\"}]"),
    ] {
        let r = auto(&state, &CS_IDS);
        assert_eq!(
            dumps(&r.to_value(), Style::Compact).expect("finite"),
            r.to_json()
        );
    }
}

#[test]
fn default_model_env() {
    assert_eq!(parse_default_model(None, &[]), Ok(None));
    assert_eq!(parse_default_model(Some("  "), &[]), Ok(None));
    assert_eq!(
        parse_default_model(Some(" EN "), &[]),
        Ok(Some(Checkpoint::english()))
    );
    assert_eq!(
        parse_default_model(Some("xx "), &[]),
        Err(format!("invalid LAYA_DEFAULT_MODEL 'xx': unknown model 'xx '; choose one of {NAMES} (or an alias: {ALIASES})"))
    );
}
