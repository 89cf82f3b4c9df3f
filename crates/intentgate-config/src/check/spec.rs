//! The request fields of the file (intentgate-config-file's `request` types) as the HTTP
//! upstream's spec types, which the checks complete and the loaded config holds. The two
//! sets of types have the same fields; the file's are what users write, the spec's what the
//! gateway sends.

use std::collections::BTreeMap;

use intentgate_config_file::request;
use intentgate_http::spec::{
    BodyFormat, ListFields, ListSubject, LookupPages, MatchCompare, MatchField, Method, ResultSpec,
};

pub(super) fn method(method: request::Method) -> Method {
    match method {
        request::Method::Get => Method::Get,
        request::Method::Post => Method::Post,
        request::Method::Put => Method::Put,
        request::Method::Patch => Method::Patch,
        request::Method::Delete => Method::Delete,
    }
}

pub(super) fn body_format(format: request::BodyFormat) -> BodyFormat {
    match format {
        request::BodyFormat::Json => BodyFormat::Json,
        request::BodyFormat::Form => BodyFormat::Form,
    }
}

pub(super) fn result(result: request::ResultSpec) -> ResultSpec {
    ResultSpec {
        external_id: result.external_id,
        pointer: result.pointer,
    }
}

pub(super) fn lookup_pages(pages: request::LookupPages) -> LookupPages {
    LookupPages {
        query: pages.query,
        next_cursor: pages.next_cursor,
        has_more: pages.has_more,
        max: pages.max,
    }
}

pub(super) fn match_fields(
    fields: BTreeMap<String, request::MatchField>,
) -> BTreeMap<String, MatchField> {
    fields
        .into_iter()
        .map(|(argument, field)| {
            let field = MatchField {
                record: field.record,
                compare: field.compare.map(|compare| match compare {
                    request::MatchCompare::Decimal => MatchCompare::Decimal,
                    request::MatchCompare::Text => MatchCompare::Text,
                }),
                minor_units: field.minor_units,
            };
            (argument, field)
        })
        .collect()
}

pub(super) fn list_fields(fields: request::ListFields) -> ListFields {
    ListFields {
        idempotency_key: fields.idempotency_key,
        intent_key: fields.intent_key,
        external_id: fields.external_id,
        amount: fields.amount,
        amount_argument: fields.amount_argument,
        amount_minor_units: fields.amount_minor_units,
        subject: fields.subject.map(|subject| match subject {
            request::ListSubject::One(pointer) => ListSubject::One(pointer),
            request::ListSubject::Several(pointers) => ListSubject::Several(pointers),
        }),
    }
}
