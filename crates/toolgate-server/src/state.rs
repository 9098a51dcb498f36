//! The application state handed to every handler: small, explicit, cheap to clone.

use std::sync::Arc;

use axum::extract::FromRef;
use toolgate_core::{Executor, Registry};
use toolgate_tools::Workspace;

use crate::auth::Authenticator;

#[derive(Clone)]
pub struct AppState {
    pub registry: Arc<Registry>,
    pub executor: Executor,
    pub authenticator: Arc<Authenticator>,
    pub workspace: Arc<Workspace>,
}

impl FromRef<AppState> for Arc<Authenticator> {
    fn from_ref(state: &AppState) -> Self {
        state.authenticator.clone()
    }
}
