//! End-to-end tests: one binary, the real gateway on loopback, real HTTP.

mod docs;
mod rest_errors;
mod rest_tools;
