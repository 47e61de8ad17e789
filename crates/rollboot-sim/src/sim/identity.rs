//! Who a caller is: the identity the authenticator gives a token (user, groups, the node of
//! a bound token).
//!
//! Shared by RBAC (`rbac.rs`, which maps tokens to identities and authorizes them) and by the
//! admission policies (`admission/`, which read it as `request.userInfo`), below both. It must
//! never decide what a caller may do, nor know tokens.

/// Who a token is, as the authenticator would say.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Identity {
    /// `system:serviceaccount:NS:NAME` for a ServiceAccount.
    pub user: String,
    /// Groups (a ServiceAccount also gets `system:serviceaccounts`,
    /// `system:serviceaccounts:NS` and `system:authenticated`).
    pub groups: Vec<String>,
    /// The node the token's pod runs on (the bound token's
    /// `authentication.kubernetes.io/node-name` extra), if any.
    pub node: Option<String>,
}

impl Identity {
    /// A ServiceAccount's identity.
    pub fn service_account(namespace: &str, name: &str) -> Identity {
        Identity {
            user: format!("system:serviceaccount:{namespace}:{name}"),
            groups: vec![
                "system:serviceaccounts".into(),
                format!("system:serviceaccounts:{namespace}"),
                "system:authenticated".into(),
            ],
            node: None,
        }
    }

    /// Who an unchecked token is (it plays a cluster admin, see `rbac.rs`) to the
    /// admission policies: a user named by the token, in the groups of a cluster admin's
    /// client certificate (`system:masters`, `system:authenticated`); no token at all is
    /// kube-apiserver's anonymous user.
    pub fn unchecked(token: &str) -> Identity {
        if token == "anonymous" {
            return Identity {
                user: "system:anonymous".into(),
                groups: vec!["system:unauthenticated".into()],
                node: None,
            };
        }
        Identity {
            user: token.into(),
            groups: vec!["system:masters".into(), "system:authenticated".into()],
            node: None,
        }
    }

    /// The same identity, on `node`.
    pub fn on_node(mut self, node: &str) -> Identity {
        self.node = Some(node.into());
        self
    }
}
