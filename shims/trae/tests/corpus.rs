//! Every SOLO stream in `fixtures/` survives SOLO → OpenAI → SOLO in each
//! proxy situation, however the bytes are chunked, with well-formed frames.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use bytes::Bytes;
use shimgate_shim_api::sse::parse_all;
use shimgate_testkit::check_openai;
use shimgate_testkit::trae::{
    bili, compare, convert, digest, pieces, rebuild, round_trip, Proxy, PROXIES,
};

fn corpus() -> Vec<(String, Vec<u8>)> {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures");
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "sse"))
        .collect();
    files.sort();
    assert!(files.len() >= 12, "the corpus went missing");
    files
        .into_iter()
        .map(|p| {
            (
                p.file_name().unwrap().to_string_lossy().into_owned(),
                std::fs::read(&p).unwrap(),
            )
        })
        .collect()
}

#[test]
fn every_fixture_round_trips_in_every_proxy_situation() {
    for (name, solo) in corpus() {
        let upstream = digest(&solo);
        for proxy in PROXIES {
            let agent = round_trip(&solo, proxy);
            parse_all(&agent).unwrap_or_else(|e| panic!("{name} {proxy:?}: {e}"));
            if let Err(why) = compare(&upstream, &digest(&agent), proxy) {
                panic!(
                    "{name} through {proxy:?}: {why}\n--- agent got ---\n{}",
                    String::from_utf8_lossy(&agent)
                );
            }
        }
    }
}

#[test]
fn openai_frames_are_well_formed_for_every_fixture() {
    for (name, solo) in corpus() {
        let openai = convert(pieces(&solo, 4096));
        check_openai(&openai).unwrap_or_else(|e| panic!("{name}: {e}"));
        check_openai(&bili(&openai)).unwrap_or_else(|e| panic!("{name} via bili: {e}"));
    }
}

#[test]
fn every_two_way_split_and_byte_by_byte_give_identical_output() {
    for (name, solo) in corpus() {
        let whole = convert([Bytes::from(solo.clone())]);
        assert_eq!(convert(pieces(&solo, 1)), whole, "{name} byte by byte");
        for at in 1..solo.len() {
            let (a, b) = solo.split_at(at);
            let split = convert([Bytes::copy_from_slice(a), Bytes::copy_from_slice(b)]);
            assert_eq!(split, whole, "{name} split at {at}");
        }
        let agent = rebuild([Bytes::from(whole.clone())]);
        assert_eq!(
            rebuild(pieces(&whole, 1)),
            agent,
            "{name} ingress byte by byte"
        );
        // Every third split keeps the test quick; byte by byte covers the rest.
        for at in (1..whole.len()).step_by(3) {
            let (a, b) = whole.split_at(at);
            let split = rebuild([Bytes::copy_from_slice(a), Bytes::copy_from_slice(b)]);
            assert_eq!(split, agent, "{name} ingress split at {at}");
        }
    }
}

#[test]
fn the_agent_gets_exactly_one_end_event() {
    for (name, solo) in corpus() {
        for proxy in PROXIES {
            let agent = parse_all(&round_trip(&solo, proxy)).unwrap();
            let ends = agent
                .iter()
                .filter(|e| e.is("done") || e.is("error"))
                .count();
            assert_eq!(ends, 1, "{name} through {proxy:?}");
            let last = agent.last().unwrap();
            assert!(last.is("done") || last.is("error"), "{name}: {last:?}");
        }
    }
}

#[test]
fn crlf_fixture_reads_like_its_lf_twin() {
    let corpus = corpus();
    let crlf = &corpus.iter().find(|(n, _)| n == "crlf.sse").unwrap().1;
    let lf: Vec<u8> = String::from_utf8(crlf.clone())
        .unwrap()
        .replace("\r\n", "\n")
        .into_bytes();
    assert_eq!(convert(pieces(crlf, 3)), convert(pieces(&lf, 5)));
    assert_eq!(digest(crlf), digest(&lf));
    let _ = Proxy::Direct;
}

/// A direct answer classifies SOLO's own events without translating them:
/// `classify` must give every event the class `event` gives it, and the
/// same verdict at the end.
#[test]
fn classify_gives_the_classes_the_translation_gives() {
    use bytes::BytesMut;
    use shimgate_shim_api::StreamTranslator;
    for (name, solo) in corpus() {
        let request = serde_json::json!({"model": "m", "stream": true});
        let mut translating = shimgate_shim_trae::ToOpenAi::new(&request);
        let mut classifying = shimgate_shim_trae::ToOpenAi::new(&request);
        let (mut out, mut scratch) = (BytesMut::new(), BytesMut::new());
        for ev in parse_all(&solo).unwrap() {
            let want = translating.event(&ev, &mut out);
            assert_eq!(
                classifying.classify(&ev, &mut scratch),
                want,
                "{name}: {ev:?}"
            );
            assert!(scratch.is_empty());
        }
        assert_eq!(
            classifying.eof(&mut scratch),
            translating.eof(&mut out),
            "{name}"
        );
    }
}
