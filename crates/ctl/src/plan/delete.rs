//! `delete KIND`: one DELETE per object, except a binding, which is found by listing first.

use super::{bindings_path, done, encode, limit_name, Method, Plan, Request};
use crate::cli::Delete;

pub(super) fn plan_delete(delete: &Delete, vhost: &str) -> Plan {
    let vh = encode(vhost);
    let delete_path =
        |path: String, message: String| done(Request::new(Method::Delete, path, None), message);
    match delete {
        Delete::Queue {
            name,
            if_empty,
            if_unused,
        } => {
            let mut query = Vec::new();
            if *if_empty {
                query.push("if-empty=true");
            }
            if *if_unused {
                query.push("if-unused=true");
            }
            let query = if query.is_empty() {
                String::new()
            } else {
                format!("?{}", query.join("&"))
            };
            delete_path(
                format!("/api/queues/{vh}/{}{query}", encode(name)),
                format!("queue '{name}' deleted"),
            )
        }
        Delete::Exchange { name, if_unused } => delete_path(
            format!(
                "/api/exchanges/{vh}/{}{}",
                encode(name),
                if *if_unused { "?if-unused=true" } else { "" }
            ),
            format!("exchange '{name}' deleted"),
        ),
        Delete::Binding(binding) => Plan::DeleteBinding {
            list: Request::get(bindings_path(vhost, binding)),
            routing_key: binding.routing_key.clone(),
        },
        Delete::User { name } => delete_path(
            format!("/api/users/{}", encode(name)),
            format!("user '{name}' deleted"),
        ),
        Delete::Vhost { name } => delete_path(
            format!("/api/vhosts/{}", encode(name)),
            format!("vhost '{name}' deleted"),
        ),
        Delete::Permission { user } => delete_path(
            format!("/api/permissions/{vh}/{}", encode(user)),
            format!("permissions of '{user}' in vhost '{vhost}' deleted"),
        ),
        Delete::TopicPermission { user } => delete_path(
            format!("/api/topic-permissions/{vh}/{}", encode(user)),
            format!("topic permissions of '{user}' in vhost '{vhost}' deleted"),
        ),
        Delete::Policy { name } => delete_path(
            format!("/api/policies/{vh}/{}", encode(name)),
            format!("policy '{name}' deleted"),
        ),
        Delete::OperatorPolicy { name } => delete_path(
            format!("/api/operator-policies/{vh}/{}", encode(name)),
            format!("operator policy '{name}' deleted"),
        ),
        Delete::VhostLimit { name } => delete_path(
            format!("/api/vhost-limits/{vh}/{}", limit_name(*name)),
            format!("limit {} of vhost '{vhost}' deleted", limit_name(*name)),
        ),
    }
}
