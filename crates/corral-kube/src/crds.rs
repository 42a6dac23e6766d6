//! The install manifest of Corral's CRDs (`deploy/crds.yaml`), rendered from
//! `corral_api::crd::all_crds()`.

/// Every CRD as one multi-document YAML file.
pub fn render_crds() -> Result<String, String> {
    let mut out = String::from(
        "# Generated from corral-api's types by corral_kube::crds::render_crds(); do not edit.\n",
    );
    for crd in corral_api::crd::all_crds() {
        out.push_str("---\n");
        out.push_str(&serde_saphyr::to_string(&crd).map_err(|e| e.to_string())?);
    }
    Ok(out)
}
