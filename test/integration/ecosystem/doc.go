// Package ecosystem holds the tests that actionledger fits the tools around it: kstatus (Flux, kubectl wait),
// Argo CD's Lua health check (config/argocd), the Prometheus rules and Grafana dashboard (config/prometheus,
// config/grafana) against the real manager's metrics, and the deployable manifests (config/default) rendered
// with kustomize and dry-run applied against a real API server.
package ecosystem
