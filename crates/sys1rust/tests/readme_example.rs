//! The README's curl example works as written against a fixture model: the request body is
//! taken from the README itself and posted to `/v1/systemone`.

use crate::support::Server;

/// The JSON body of the README's `curl ... -d '<body>'` example.
fn readme_body() -> String {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../README.md"))
        .expect("README.md");
    let start = readme
        .find("curl -s http://127.0.0.1:8000/v1/systemone")
        .expect("the curl example");
    let body = &readme[start..];
    let open = body.find("-d '").expect("a -d body") + 4;
    let close = body[open..].find('\'').expect("the closing quote") + open;
    body[open..close].to_owned()
}

#[test]
fn readme_curl_example_answers() {
    let body = readme_body();
    let server = Server::tiny(&[]);
    let resp = server.post_json("/v1/systemone", &body);
    assert_eq!(resp.status, 200, "{}", resp.text());
    let text = resp.text();
    for needle in [
        "\"dept\":{\"type\":\"choice\",\"choice\":",
        "\"urgency\":{\"type\":\"score\",\"score\":",
        "\"refund\":{\"type\":\"noul\",\"noul\":",
        "\"routing\":{\"model\":\"english\"",
    ] {
        assert!(text.contains(needle), "{needle} missing from {text}");
    }
    assert!(resp.header("x-inference-time-ms").is_some());
}
