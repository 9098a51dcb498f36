//! End-to-end tests: one binary, the real gateway on loopback, real HTTP.

mod agents;
mod approvals;
mod audit_api;
mod auth;
mod commands;
mod conformance;
mod console;
mod deploy;
mod docs;
mod jwt;
mod limits;
mod mcp;
mod mcp_sdk;
mod overload;
mod rate_limits;
mod relay;
mod resources;
mod rest_errors;
mod rest_tools;
mod schemathesis;
mod secrets;
mod telemetry;
mod tenancy;
mod tenant_upstreams;
mod upstream;
mod web;
