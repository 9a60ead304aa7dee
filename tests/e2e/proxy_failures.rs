//! A compression proxy that fails before it reaches the return leg — an
//! answer that is not the expected stream, or a stream that ends first —
//! makes the ingress send the request upstream itself (`fallback`), and the
//! agent gets the direct answer only: never both a fallback and a part of
//! the proxy's answer.

use http::{Method, StatusCode};

use crate::support::client;
use crate::support::proxy::{Misbehave, Options};
use crate::support::qoder;
use crate::support::trae;
use crate::support::upstream::Upstream;
use crate::support::Gate;

fn bad(m: Misbehave) -> Options {
    Options {
        misbehave: Some(m),
        ..Options::default()
    }
}

#[tokio::test]
async fn a_proxy_answering_without_the_return_leg_falls_back_on_both_wires() {
    for m in [Misbehave::Garbage, Misbehave::Json, Misbehave::CutStream] {
        let up = Upstream::always(trae::reply(&trae::answer("direct trae", None, 5))).await;
        let base = format!(
            "[[shims.trae.routes]]\nname = \"t\"\nurl = \"{}\"\n",
            up.url()
        );
        let (gate, _p) = Gate::behind_proxy(&base, "trae", bad(m)).await;
        let resp = client::send(
            Method::POST,
            &format!("{}{}", gate.trae, trae::PATH),
            &[("content-type", "application/json")],
            serde_json::to_vec(&trae::body(&[trae::text("user", "hi")])).unwrap(),
        )
        .await;
        assert_eq!(resp.status, StatusCode::OK, "{m:?}");
        let d = shimgate_testkit::trae::digest(&resp.body);
        assert_eq!(d.text, "direct trae", "{m:?}: {}", resp.text());
        assert!(!resp.text().contains("from the proxy") && !resp.text().contains("half"));
        let t = &gate.status().await["traeShim"];
        assert_eq!(t["fallback"], 1, "{m:?}: {t:#}");
        assert!(
            t["lastError"]
                .as_str()
                .unwrap()
                .contains("sent upstream directly"),
            "{t:#}"
        );
        assert_eq!(up.hits(), 1);

        let up = Upstream::always(qoder::answer("direct qoder", 5)).await;
        let base = format!(
            "[[shims.qoder.routes]]\nname = \"q\"\nurl = \"{}\"\n",
            up.url()
        );
        let (gate, _p) = Gate::behind_proxy(&base, "qoder", bad(m)).await;
        let resp = qoder::send_hi(&gate.qoder).await;
        let (text, done, errors) = qoder::read_answer(&resp.body);
        assert_eq!(
            (text.as_str(), done, errors.len()),
            ("direct qoder", true, 0),
            "{m:?}"
        );
        assert_eq!(gate.status().await["qoderShim"]["fallback"], 1, "{m:?}");
    }
}
