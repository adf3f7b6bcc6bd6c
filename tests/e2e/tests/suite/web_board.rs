//! The web page's board, in a real Chromium (filled in by its lane).
