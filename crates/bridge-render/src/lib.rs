//! Renders what the tools return as compact plain text.
