//! The PATCH content types: JSON merge patch (RFC 7386), JSON patch (RFC 6902) and the part of
//! strategic merge patch that kubectl and rollboot send.
//!
//! Strategic merge patch here: maps merge recursively and `null` deletes a key (as merge
//! patch); lists whose Go type declares `patchStrategy: merge` are merged by their
//! `patchMergeKey` (see [`merge_key`]); every other list is replaced; `$setElementOrder/*` is
//! accepted and ignored (order of the merged list is kept); `$patch: delete` on a keyed list
//! element deletes it and `$patch: replace` on a map replaces it; `$retainKeys` and
//! `$deleteFromPrimitiveList/*` answer 422 rather than doing the wrong thing. Server-side apply
//! (`application/apply-patch+yaml`) is not supported (415). It must never touch the store.

use serde_json::{Map, Value};

use super::errors::ApiError;

/// A supported PATCH content type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PatchType {
    /// application/merge-patch+json
    Merge,
    /// application/json-patch+json
    Json,
    /// application/strategic-merge-patch+json
    Strategic,
}

impl PatchType {
    /// The patch type of a Content-Type header, or 415 (golden 24, 25).
    pub fn from_content_type(ct: &str) -> Result<PatchType, ApiError> {
        match ct.split(';').next().unwrap_or("").trim() {
            "application/merge-patch+json" => Ok(PatchType::Merge),
            "application/json-patch+json" => Ok(PatchType::Json),
            "application/strategic-merge-patch+json" => Ok(PatchType::Strategic),
            _ => Err(ApiError::unsupported_media_type()),
        }
    }
}

/// Applies a patch body to `target`.
pub fn apply(
    kind_path: &str,
    typ: PatchType,
    target: &Value,
    body: &[u8],
) -> Result<Value, ApiError> {
    let decode = |e: serde_json::Error| ApiError::bad_request(format!("error decoding patch: {e}"));
    match typ {
        PatchType::Merge => {
            let patch: Value = serde_json::from_slice(body).map_err(decode)?;
            let mut out = target.clone();
            json_patch::merge(&mut out, &patch);
            Ok(out)
        }
        PatchType::Json => {
            let patch: json_patch::Patch = serde_json::from_slice(body).map_err(decode)?;
            let mut out = target.clone();
            json_patch::patch(&mut out, &patch).map_err(|_| ApiError::invalid_generic())?;
            Ok(out)
        }
        PatchType::Strategic => {
            let patch: Value = serde_json::from_slice(body).map_err(decode)?;
            let mut out = target.clone();
            strategic(&mut out, &patch, kind_path)?;
            Ok(out)
        }
    }
}

/// The patchMergeKey of a list at `path` (dot-joined field names from the object root, kind
/// first), for the lists declared `patchStrategy: merge` that kubectl and controllers patch.
pub fn merge_key(path: &str) -> Option<&'static str> {
    let field = path.split_once('.').map_or(path, |(_, rest)| rest);
    Some(match field {
        "status.conditions" => "type",
        "status.addresses" => "type",
        "metadata.ownerReferences" => "uid",
        "spec.containers" | "spec.initContainers" | "spec.ephemeralContainers" => "name",
        "spec.volumes" => "name",
        "spec.template.spec.containers" | "spec.template.spec.initContainers" => "name",
        "spec.template.spec.volumes" => "name",
        "status.containerStatuses" | "status.initContainerStatuses" => "name",
        "spec.containers.env" | "spec.template.spec.containers.env" => "name",
        "spec.containers.ports" | "spec.template.spec.containers.ports" => "containerPort",
        "spec.containers.volumeMounts" | "spec.template.spec.containers.volumeMounts" => {
            "mountPath"
        }
        _ => return None,
    })
}

fn unsupported(directive: &str) -> ApiError {
    ApiError {
        message: Some(format!(
            "strategic merge patch directive {directive} is not supported by the rollboot simulator"
        )),
        ..ApiError::invalid_generic()
    }
}

fn strategic(target: &mut Value, patch: &Value, path: &str) -> Result<(), ApiError> {
    let Some(pmap) = patch.as_object() else {
        *target = patch.clone();
        return Ok(());
    };
    if let Some(d) = pmap.get("$patch") {
        if d == "replace" {
            let mut p = pmap.clone();
            p.remove("$patch");
            *target = Value::Object(p);
            return Ok(());
        }
        return Err(unsupported(&format!("$patch: {d}")));
    }
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    let tmap = target.as_object_mut().expect("object");
    for (k, v) in pmap {
        if k.starts_with("$setElementOrder/") {
            continue;
        }
        if k.starts_with('$') {
            return Err(unsupported(k));
        }
        let child = format!("{path}.{k}");
        match v {
            Value::Null => {
                tmap.remove(k);
            }
            Value::Object(_) => {
                let t = tmap.entry(k.clone()).or_insert(Value::Null);
                strategic(t, v, &child)?;
            }
            Value::Array(items) => match merge_key(&child) {
                Some(key) => {
                    let t = tmap.entry(k.clone()).or_insert(Value::Array(Vec::new()));
                    merge_list(t, items, key, &child)?;
                }
                None => {
                    tmap.insert(k.clone(), v.clone());
                }
            },
            _ => {
                tmap.insert(k.clone(), v.clone());
            }
        }
    }
    Ok(())
}

fn merge_list(target: &mut Value, items: &[Value], key: &str, path: &str) -> Result<(), ApiError> {
    if !target.is_array() {
        *target = Value::Array(Vec::new());
    }
    let list = target.as_array_mut().expect("array");
    for item in items {
        let Some(k) = item.get(key) else {
            return Err(unsupported(&format!("list item without merge key {key}")));
        };
        let pos = list.iter().position(|e| e.get(key) == Some(k));
        if item.get("$patch").is_some_and(|d| d == "delete") {
            if let Some(i) = pos {
                list.remove(i);
            }
            continue;
        }
        match pos {
            Some(i) => strategic(&mut list[i], item, path)?,
            None => {
                let mut fresh = Value::Object(Map::new());
                strategic(&mut fresh, item, path)?;
                list.push(fresh);
            }
        }
    }
    Ok(())
}
