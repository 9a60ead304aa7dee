//! `shimgate translate`: runs a captured stream through one leg of a shim,
//! offline, and writes what the shim would forward; with `--check` it
//! reports the frame problems a compression proxy would trip over instead
//! (the usual cause of "stream truncated").

use std::io::{Read, Write};
use std::process::ExitCode;

use bytes::Bytes;
use shimgate_shim_api::{Drive, StreamTranslator};

use crate::cmd::cli::Leg;
use crate::host;

fn translator(shim: &str, leg: Leg) -> Option<Box<dyn StreamTranslator>> {
    let host = host::all().get(shim)?;
    Some(match leg {
        Leg::Return => host.offline_return_leg(),
        Leg::Ingress => host.offline_ingress(),
    })
}

/// Translates a whole stream as the runtime would (events until the end or
/// an error, then `eof`, and `fail` for a cut stream), calling `emit` with
/// every piece of output as soon as it exists.
pub fn translate_stream(
    shim: &str,
    leg: Leg,
    input: &mut dyn Read,
    emit: &mut dyn FnMut(&[u8]) -> std::io::Result<()>,
) -> std::io::Result<()> {
    let t = translator(shim, leg).ok_or_else(|| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("no shim {shim:?}"),
        )
    })?;
    let mut drive = Drive::new(t);
    let mut buf = vec![0u8; 64 * 1024];
    while !drive.is_done() {
        let n = match input.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        let out = drive.push(Bytes::copy_from_slice(&buf[..n]));
        if !out.is_empty() {
            emit(&out)?;
        }
    }
    emit(&drive.finish())
}

/// One problem in a stream, as a proxy would see it (`frame` is 1-based, 0
/// for the stream as a whole).
pub use shimgate_testkit::Problem;

/// Checks a stream meant to be bare OpenAI SSE (what the return leg sends a
/// proxy) with the one check the tests use too
/// ([`shimgate_testkit::check_openai`]): UTF-8 with `\n` line ends, one
/// `data:` line per frame and `\n\n` after it, a JSON object with `choices`
/// or `error` and no envelope keys, exactly one `[DONE]`, last.
pub fn check_openai(bytes: &[u8]) -> Vec<Problem> {
    shimgate_testkit::check_openai(bytes)
        .err()
        .map(|problems| problems.0)
        .unwrap_or_default()
}

/// Runs the command on stdin/stdout.
pub fn run(shim: &str, leg: Leg, check: bool) -> ExitCode {
    let stdin = std::io::stdin();
    let mut input = stdin.lock();
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    if !check {
        let result = translate_stream(shim, leg, &mut input, &mut |b: &[u8]| {
            out.write_all(b)?;
            out.flush()
        });
        return match result {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("shimgate translate: {e}");
                ExitCode::FAILURE
            }
        };
    }
    let mut captured = Vec::new();
    if let Err(e) = input.read_to_end(&mut captured) {
        eprintln!("shimgate translate: {e}");
        return ExitCode::FAILURE;
    }
    let mut translated = Vec::new();
    let _ = translate_stream(shim, leg, &mut captured.as_slice(), &mut |b: &[u8]| {
        translated.extend_from_slice(b);
        Ok(())
    });
    let report = |label: &str, problems: &[Problem]| {
        if problems.is_empty() {
            format!("{label}: clean\n")
        } else {
            let mut s = format!("{label}: {} problem(s)\n", problems.len());
            for p in problems {
                if p.frame == 0 {
                    s.push_str(&format!("  stream: {}\n", p.what));
                } else {
                    s.push_str(&format!("  frame {}: {}\n", p.frame, p.what));
                }
            }
            s
        }
    };
    let shim_name = shim;
    let text = match leg {
        Leg::Return => {
            let input_problems = check_openai(&captured);
            let output_problems = check_openai(&translated);
            let clean = output_problems.is_empty();
            let s = format!(
                "{}{}",
                report(
                    "input as a proxy would see it untranslated",
                    &input_problems
                ),
                report(
                    &format!("after the {shim_name} return leg"),
                    &output_problems
                )
            );
            (s, clean)
        }
        Leg::Ingress => {
            let input_problems = check_openai(&captured);
            let clean = input_problems.is_empty();
            let frames = shimgate_shim_api::sse::parse_all(&translated)
                .map(|v| v.len())
                .unwrap_or(0);
            let s = format!(
                "{}after the {shim_name} ingress: {frames} frame(s) for the agent\n",
                report("input from the proxy", &input_problems)
            );
            (s, clean)
        }
    };
    let _ = out.write_all(text.0.as_bytes());
    if text.1 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn single_newline_frames_are_reported() {
        let p = check_openai(b"data: {\"choices\":[]}\ndata: {\"choices\":[]}\n\ndata: [DONE]\n\n");
        assert_eq!(p.len(), 1);
        assert!(p[0].what.contains("single \\n"), "{p:?}");
    }

    #[test]
    fn envelopes_and_a_missing_done_are_reported() {
        let p = check_openai(b"data: {\"headers\":{},\"body\":\"{}\",\"statusCodeValue\":200}\n\n");
        let whats: Vec<_> = p.iter().map(|p| p.what.as_str()).collect();
        assert!(whats.iter().any(|w| w.contains("envelope")));
        assert!(whats.iter().any(|w| w.contains("no data: [DONE]")));
    }

    #[test]
    fn a_clean_stream_has_no_problems() {
        assert!(check_openai(
            b"data: {\"choices\":[{\"delta\":{\"content\":\"hi\"}}]}\n\ndata: [DONE]\n\n"
        )
        .is_empty());
    }
}
