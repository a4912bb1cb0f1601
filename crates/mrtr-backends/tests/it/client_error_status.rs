//! How rmcp's reqwest Streamable HTTP client classifies non-2xx responses
//! (documented in NOTES.md): a JSON body holding a JSON-RPC error is
//! surfaced as that JSON-RPC message whatever the status (except 429); a
//! non-JSON body becomes a transport error.

use std::{collections::HashMap, sync::Arc};

use axum::{Router, body::Body, http::Response, routing::post};
use rmcp::{
    model::{
        CallToolRequest, CallToolRequestParams, ClientJsonRpcMessage, ClientRequest, RequestId,
        ServerJsonRpcMessage,
    },
    transport::streamable_http_client::{
        StreamableHttpClient, StreamableHttpError, StreamableHttpPostResponse,
    },
};

async fn mock(status: u16, content_type: &'static str, body: &'static str) -> anyhow::Result<String> {
    let app = Router::new().route(
        "/mcp",
        post(move || async move {
            Response::builder()
                .status(status)
                .header("content-type", content_type)
                .body(Body::from(body))
                .unwrap_or_default()
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    tokio::spawn(async move { axum::serve(listener, app).await });
    Ok(format!("http://{addr}/mcp"))
}

fn call() -> ClientJsonRpcMessage {
    ClientJsonRpcMessage::request(
        ClientRequest::CallToolRequest(CallToolRequest::new(CallToolRequestParams::new("x"))),
        RequestId::Number(7),
    )
}

async fn post_to(
    status: u16,
    content_type: &'static str,
    body: &'static str,
) -> anyhow::Result<Result<StreamableHttpPostResponse, StreamableHttpError<reqwest::Error>>> {
    let url = mock(status, content_type, body).await?;
    Ok(reqwest::Client::new()
        .post_message(Arc::from(url.as_str()), call(), None, None, HashMap::new())
        .await)
}

const JSONRPC_ERROR: &str = r#"{"jsonrpc":"2.0","id":7,"error":{"code":-32602,"message":"bad state"}}"#;

#[tokio::test]
async fn json_rpc_error_bodies_survive_error_statuses() -> anyhow::Result<()> {
    for status in [400, 404, 500, 502, 503] {
        match post_to(status, "application/json", JSONRPC_ERROR).await? {
            Ok(StreamableHttpPostResponse::Json(ServerJsonRpcMessage::Error(error), _)) => {
                assert_eq!(error.error.code.0, -32602, "HTTP {status}");
            }
            other => anyhow::bail!("HTTP {status}: unexpected {other:?}"),
        }
    }
    Ok(())
}

#[tokio::test]
async fn non_json_error_bodies_are_transport_errors() -> anyhow::Result<()> {
    match post_to(502, "text/plain", "bad gateway").await? {
        Err(StreamableHttpError::HttpStatus(error)) => assert_eq!(error.status, 502),
        other => anyhow::bail!("502 text: unexpected {other:?}"),
    }
    match post_to(403, "text/plain", "Forbidden: Host header is not allowed").await? {
        Err(StreamableHttpError::UnexpectedServerResponse(message)) => {
            assert!(message.contains("403"), "{message}");
        }
        other => anyhow::bail!("403 text: unexpected {other:?}"),
    }
    match post_to(429, "application/json", JSONRPC_ERROR).await? {
        Err(StreamableHttpError::HttpStatus(error)) => assert_eq!(error.status, 429),
        other => anyhow::bail!("429 json: unexpected {other:?}"),
    }
    Ok(())
}
