//! The HTTP upstream: tools whose effect is an HTTP request.
//!
//! A tool's [`spec::CallSpec`] says how to turn its arguments into a request (method, path
//! template, query, headers, JSON body template) and what to take from the response; its
//! [`spec::LookupSpec`] says how to find the effect afterwards without performing it, and
//! its [`spec::ListSpec`] how to page through the provider's records for reconciliation.

pub mod spec;
