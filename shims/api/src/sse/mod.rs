//! Server-sent events: the incremental zero-copy parser and the frame writer.

mod parser;
mod writer;

pub use parser::{
    parse_all, IncompleteEvent, SseError, SseEvent, SseParser, DEFAULT_MAX_EVENT_BYTES,
};
pub use writer::{write_data, write_event, write_sse_event, DONE_FRAME};
