//! Errors as `application/problem+json` (RFC 9457): a type, a title and a detail that
//! says what to change. Internals (paths, SQL, secrets) never reach the body.

use axum::extract::rejection::BytesRejection;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

use crate::wire::ProblemBody;

/// One problem response.
#[derive(Debug, Clone)]
pub struct Problem {
    pub status: StatusCode,
    /// A stable, short identifier (`unknown-tool`), sent as `urn:intentgate:problem:<kind>`.
    pub kind: &'static str,
    pub title: &'static str,
    pub detail: String,
    /// Seconds after which a retry may succeed (503).
    pub retry_after_seconds: Option<u64>,
}

impl Problem {
    pub fn new(
        status: StatusCode,
        kind: &'static str,
        title: &'static str,
        detail: impl Into<String>,
    ) -> Problem {
        Problem {
            status,
            kind,
            title,
            detail: detail.into(),
            retry_after_seconds: None,
        }
    }

    /// A request body that could not be read: 413 saying `too_large` when it is over the
    /// limit, otherwise the rejection's own status and text.
    pub fn unreadable_body(rejection: BytesRejection, too_large: impl Into<String>) -> Problem {
        if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
            Problem::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                "body-too-large",
                "Request body too large",
                too_large,
            )
        } else {
            Problem::new(
                rejection.status(),
                "bad-body",
                "Unreadable body",
                rejection.body_text(),
            )
        }
    }
}

impl IntoResponse for Problem {
    fn into_response(self) -> Response {
        let body = ProblemBody {
            kind: format!("urn:intentgate:problem:{}", self.kind),
            title: self.title.to_owned(),
            status: self.status.as_u16(),
            detail: self.detail,
        };
        let text = serde_json::to_string(&body).expect("a problem body is plain JSON");
        let mut response = (self.status, text).into_response();
        let headers = response.headers_mut();
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/problem+json"),
        );
        if let Some(seconds) = self.retry_after_seconds {
            headers.insert(header::RETRY_AFTER, HeaderValue::from(seconds));
        }
        if self.status == StatusCode::PAYLOAD_TOO_LARGE {
            // The rest of the body was never read, so the server closes the connection: say
            // so, or a client that reuses it fails its next request on a closed socket.
            headers.insert(header::CONNECTION, HeaderValue::from_static("close"));
        }
        response
    }
}
