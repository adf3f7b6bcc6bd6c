//! Server-sent events, parsed from a byte stream as it arrives (pure: bytes in,
//! events out), for the terminal client's live views.

/// One event: its id (if any), name (`message` when unnamed) and data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SseEvent {
    pub id: Option<String>,
    pub event: String,
    pub data: String,
}

/// Collects bytes and hands out whole events.
#[derive(Debug, Default)]
pub struct SseParser {
    buffer: String,
    /// Bytes of a UTF-8 character cut between two chunks.
    partial: Vec<u8>,
}

impl SseParser {
    /// Adds a chunk; returns the events it completed.
    pub fn push(&mut self, chunk: &[u8]) -> Vec<SseEvent> {
        self.partial.extend_from_slice(chunk);
        let valid = match std::str::from_utf8(&self.partial) {
            Ok(text) => text.len(),
            Err(e) => e.valid_up_to(),
        };
        let rest = self.partial.split_off(valid);
        let text = std::mem::replace(&mut self.partial, rest);
        self.buffer
            .push_str(&String::from_utf8(text).unwrap_or_default());
        // Line ends may be \r\n, \n or \r; events end at a blank line. A \r at
        // the very end waits: its \n may be in the next chunk.
        let held_cr = self.buffer.ends_with('\r');
        if held_cr {
            self.buffer.pop();
        }
        if self.buffer.contains('\r') {
            self.buffer = self.buffer.replace("\r\n", "\n").replace('\r', "\n");
        }
        let mut events = Vec::new();
        while let Some(end) = self.buffer.find("\n\n") {
            let block: String = self.buffer.drain(..end + 2).collect();
            if let Some(event) = parse_block(&block) {
                events.push(event);
            }
        }
        if held_cr {
            self.buffer.push('\r');
        }
        events
    }
}

fn parse_block(block: &str) -> Option<SseEvent> {
    let mut id = None;
    let mut event = String::from("message");
    let mut data: Vec<&str> = Vec::new();
    for line in block.lines() {
        if line.starts_with(':') {
            continue; // a comment (keep-alive)
        }
        let (field, value) = line.split_once(':').unwrap_or((line, ""));
        let value = value.strip_prefix(' ').unwrap_or(value);
        match field {
            "id" => id = Some(value.to_string()),
            "event" => event = value.to_string(),
            "data" => data.push(value),
            _ => {}
        }
    }
    if data.is_empty() {
        return None;
    }
    Some(SseEvent {
        id,
        event,
        data: data.join("\n"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_are_whole_however_the_bytes_arrive() {
        let stream = "id: 1.1\nevent: text\ndata: {\"text\":\"h\u{e9}\"}\n\n: keep-alive\n\n\
                      event: status\r\ndata: a\r\ndata: b\r\n\r\n";
        let bytes = stream.as_bytes();
        // Every split point, including inside the two-byte character.
        for cut in 0..bytes.len() {
            let mut parser = SseParser::default();
            let mut events = parser.push(&bytes[..cut]);
            events.extend(parser.push(&bytes[cut..]));
            assert_eq!(
                events,
                [
                    SseEvent {
                        id: Some("1.1".into()),
                        event: "text".into(),
                        data: "{\"text\":\"h\u{e9}\"}".into()
                    },
                    SseEvent {
                        id: None,
                        event: "status".into(),
                        data: "a\nb".into()
                    },
                ],
                "cut at {cut}"
            );
        }
    }
}
