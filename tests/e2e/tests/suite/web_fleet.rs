//! The web page's fleet, in a real Chromium (filled in by its lane).
