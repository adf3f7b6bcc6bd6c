//! A server-sent-events decoder: bytes in, events out, however the bytes are chunked.

/// One event: its `event:` name (if any) and its `data:` lines joined with `\n`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SseEvent {
    pub event: Option<String>,
    pub data: String,
}

#[derive(Debug)]
pub struct SseDecoder {
    /// Longest line, and longest event's data, kept; past it the decoder stops
    /// collecting and says so (`overflowed`), so a server cannot grow it without end.
    max_event: usize,
    overflow: bool,
    /// Bytes of `data` in the current event.
    data_len: usize,
    /// Bytes of the current, unfinished line.
    line: Vec<u8>,
    /// The last byte seen was a `\r` (a following `\n` belongs to it).
    after_cr: bool,
    event: Option<String>,
    data: Vec<String>,
    has_data: bool,
}

impl Default for SseDecoder {
    fn default() -> Self {
        Self::with_max_event(usize::MAX)
    }
}

impl SseDecoder {
    pub fn new() -> Self {
        Self::default()
    }

    /// A decoder that refuses lines or events longer than `max_event` bytes.
    pub fn with_max_event(max_event: usize) -> Self {
        SseDecoder {
            max_event,
            overflow: false,
            data_len: 0,
            line: Vec::new(),
            after_cr: false,
            event: None,
            data: Vec::new(),
            has_data: false,
        }
    }

    /// Whether a line or an event went past the bound; nothing more is decoded then.
    pub fn overflowed(&self) -> bool {
        self.overflow
    }

    /// Feeds a chunk; returns the events it completed.
    pub fn push(&mut self, chunk: &[u8]) -> Vec<SseEvent> {
        let mut events = Vec::new();
        if self.overflow {
            return events;
        }
        for &byte in chunk {
            match byte {
                b'\n' if self.after_cr => self.after_cr = false,
                b'\n' | b'\r' => {
                    self.after_cr = byte == b'\r';
                    let line = std::mem::take(&mut self.line);
                    if let Some(event) = self.line_done(&line) {
                        events.push(event);
                    }
                }
                _ => {
                    self.after_cr = false;
                    if self.line.len() >= self.max_event {
                        self.overflow = true;
                        return events;
                    }
                    self.line.push(byte);
                }
            }
        }
        events
    }

    /// The stream ended: an event without its final blank line still counts.
    pub fn finish(&mut self) -> Option<SseEvent> {
        let line = std::mem::take(&mut self.line);
        if !line.is_empty()
            && let Some(event) = self.line_done(&line)
        {
            return Some(event);
        }
        self.dispatch()
    }

    fn line_done(&mut self, line: &[u8]) -> Option<SseEvent> {
        if line.is_empty() {
            return self.dispatch();
        }
        let line = String::from_utf8_lossy(line);
        if line.starts_with(':') {
            return None; // comment / keep-alive
        }
        let (field, value) = match line.split_once(':') {
            Some((field, value)) => (field, value.strip_prefix(' ').unwrap_or(value)),
            None => (line.as_ref(), ""),
        };
        match field {
            "event" => self.event = Some(value.to_string()),
            "data" => {
                self.data_len += value.len() + 1;
                if self.data_len > self.max_event {
                    self.overflow = true;
                    return None;
                }
                self.data.push(value.to_string());
                self.has_data = true;
            }
            _ => {} // id, retry, unknown fields
        }
        None
    }

    fn dispatch(&mut self) -> Option<SseEvent> {
        let event = self.event.take();
        if !self.has_data {
            return None;
        }
        self.has_data = false;
        self.data_len = 0;
        Some(SseEvent {
            event,
            data: std::mem::take(&mut self.data).join("\n"),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode_in_chunks(input: &str, size: usize) -> Vec<SseEvent> {
        let mut decoder = SseDecoder::new();
        let mut events: Vec<SseEvent> = input
            .as_bytes()
            .chunks(size)
            .flat_map(|chunk| decoder.push(chunk))
            .collect();
        events.extend(decoder.finish());
        events
    }

    #[test]
    fn events_survive_any_chunking_and_line_ending() {
        let input = "event: message_start\ndata: {\"a\":1}\n\n: ping\n\ndata: two\r\ndata: lines\r\n\r\nevent: x\rdata: é\r\r";
        let expected = vec![
            SseEvent {
                event: Some("message_start".into()),
                data: "{\"a\":1}".into(),
            },
            SseEvent {
                event: None,
                data: "two\nlines".into(),
            },
            SseEvent {
                event: Some("x".into()),
                data: "é".into(),
            },
        ];
        for size in [1, 2, 3, 7, 64] {
            assert_eq!(decode_in_chunks(input, size), expected, "chunk size {size}");
        }
    }

    #[test]
    fn an_unterminated_last_event_is_kept() {
        assert_eq!(
            decode_in_chunks("data: [DONE]", 4),
            vec![SseEvent {
                event: None,
                data: "[DONE]".into()
            }]
        );
    }

    #[test]
    fn a_line_or_event_past_the_bound_stops_the_decoder() {
        let mut decoder = SseDecoder::with_max_event(16);
        assert_eq!(decoder.push(b"data: short\n\n").len(), 1);
        assert!(!decoder.overflowed());
        // One endless line, never ended.
        assert!(decoder.push(&[b'x'; 64]).is_empty());
        assert!(decoder.overflowed());
        assert!(decoder.push(b"\n\ndata: more\n\n").is_empty());

        // Many short data lines adding up past the bound.
        let mut decoder = SseDecoder::with_max_event(16);
        decoder.push(b"data: 0123456\ndata: 0123456\ndata: 0123456\n");
        assert!(decoder.overflowed());
    }

    #[test]
    fn an_event_name_without_data_dispatches_nothing() {
        assert_eq!(decode_in_chunks("event: ping\n\n", 5), vec![]);
    }
}
