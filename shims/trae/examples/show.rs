#![allow(clippy::unwrap_used)]
use shimgate_shim_trae::testkit::*;
fn main() {
    let f = std::env::args().nth(1).unwrap();
    let solo = std::fs::read(f).unwrap();
    let openai = convert(pieces(&solo, 4096));
    println!("--- openai ---\n{}", String::from_utf8_lossy(&openai));
    println!("--- bili ---\n{}", String::from_utf8_lossy(&bili(&openai)));
    println!(
        "--- agent (direct) ---\n{}",
        String::from_utf8_lossy(&round_trip(&solo, Proxy::Direct))
    );
    println!(
        "--- agent (bili) ---\n{}",
        String::from_utf8_lossy(&round_trip(&solo, Proxy::Bili))
    );
}
