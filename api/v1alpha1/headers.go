/*
Copyright 2026.

Licensed under the Apache License, Version 2.0 (the "License");
you may not use this file except in compliance with the License.
You may obtain a copy of the License at

    http://www.apache.org/licenses/LICENSE-2.0

Unless required by applicable law or agreed to in writing, software
distributed under the License is distributed on an "AS IS" BASIS,
WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
See the License for the specific language governing permissions and
limitations under the License.
*/

package v1alpha1

import "strings"

// Routing-override headers (issue 40 row 7). Proxies, gateways and web frameworks in front of a provider route,
// rewrite or authorize a request by these headers (X-Original-URL and X-Rewrite-URL replace the path, X-Forwarded-
// Prefix and X-Forwarded-Path move it, X-HTTP-Method-Override changes the method, X-Forwarded-Host and Forwarded
// name another host, X-Forwarded-For and X-Real-IP another client address). An action against a ClusterDestination
// with a base path is sent with the platform's credentials, so such a header would take the request out of the
// base path (or past the provider's address allowlist) with them. The manager is the client: it forwards
// nothing, so it never sends them. The CEL rule on ActionRequest.Headers spells the same list out (a marker
// cannot name a Go value; TestRoutingHeadersAgreeWithTheCRD checks the generated CRD), and the controller
// refuses a stored action that sets one (InvalidSpec, nothing sent).
var (
	// RoutingHeaders are the refused names, lower case.
	RoutingHeaders = []string{
		"forwarded", "x-rewrite-url", "x-http-method-override", "x-http-method", "x-method-override",
		"x-real-ip", "x-host", "x-envoy-original-path",
	}
	// RoutingHeaderPrefixes are the refused prefixes, lower case: every X-Forwarded-* (Host, Proto, Prefix,
	// Path, Port, For, Uri, Scheme, Server, ...) and X-Original-* (URL, URI, Method, Host, Forwarded-For, ...)
	// header is set by an intermediary, never by the client that makes the request.
	RoutingHeaderPrefixes = []string{"x-forwarded-", "x-original-"}
)

// RoutingHeader reports whether name (any case) is a routing-override header: one of RoutingHeaders or under
// one of RoutingHeaderPrefixes.
func RoutingHeader(name string) bool {
	n := strings.ToLower(name)
	for _, h := range RoutingHeaders {
		if n == h {
			return true
		}
	}
	for _, p := range RoutingHeaderPrefixes {
		if strings.HasPrefix(n, p) {
			return true
		}
	}
	return false
}
