//! The web page's chat, in a real Chromium (filled in by its lane).
