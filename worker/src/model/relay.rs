//! Model clients that reach providers through the control plane's relay.

use chorus_proto::domain::ModelRoute;

use super::anthropic::AnthropicClient;
use super::http::Endpoint;
use super::openai::OpenAiClient;
use super::{ModelClient, ModelError, ModelReply, ModelRequest};
use crate::tool_loop::ClientFactory;

/// A client for whichever wire format a route names.
pub enum AnyClient {
    OpenAi(OpenAiClient),
    Anthropic(AnthropicClient),
}

impl ModelClient for AnyClient {
    async fn stream(
        &self,
        request: &ModelRequest<'_>,
        on_text: &mut (dyn FnMut(&str) + Send),
    ) -> Result<ModelReply, ModelError> {
        match self {
            AnyClient::OpenAi(client) => client.stream(request, on_text).await,
            AnyClient::Anthropic(client) => client.stream(request, on_text).await,
        }
    }
}

/// Builds clients that call `<control plane><relay path>` with the worker credential.
#[derive(Clone)]
pub struct RelayClients {
    http: reqwest::Client,
    control_plane: String,
    credential: String,
}

impl RelayClients {
    pub fn new(http: reqwest::Client, control_plane: &str, credential: &str) -> Self {
        RelayClients {
            http,
            control_plane: control_plane.trim_end_matches('/').to_string(),
            credential: credential.to_string(),
        }
    }

    /// The HTTP client, the control plane's base URL and the worker's credential:
    /// what the CLI backends' model proxy forwards with (the CLI never sees them).
    pub fn http(&self) -> &reqwest::Client {
        &self.http
    }

    pub fn control_plane(&self) -> &str {
        &self.control_plane
    }

    pub fn credential(&self) -> &str {
        &self.credential
    }
}

impl ClientFactory for RelayClients {
    type Client = AnyClient;

    fn client(&self, route: &ModelRoute) -> Result<AnyClient, ModelError> {
        let base = format!("{}{}", self.control_plane, route.relay_path);
        let http = self.http.clone();
        match route.api.as_str() {
            ModelRoute::OPENAI_CHAT => Ok(AnyClient::OpenAi(OpenAiClient(Endpoint::new(
                http,
                base,
                self.credential.clone(),
                route.provider.clone(),
            )))),
            ModelRoute::ANTHROPIC_MESSAGES => Ok(AnyClient::Anthropic(AnthropicClient(
                Endpoint::new(http, base, self.credential.clone(), route.provider.clone()),
            ))),
            other => Err(ModelError::Fatal(format!(
                "this worker cannot speak the '{other}' model API; upgrade chorus-worker"
            ))),
        }
    }
}
