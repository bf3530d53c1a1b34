package controller

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	actionsv1alpha1 "github.com/actionledger/actionledger/api/v1alpha1"
	"github.com/actionledger/actionledger/internal/expr"
	"github.com/actionledger/actionledger/internal/fingerprint"
	"github.com/actionledger/actionledger/internal/httpexec"
	"github.com/actionledger/actionledger/internal/ledger"
	"github.com/actionledger/actionledger/internal/retry"
)

// selectedHeaders are the response headers kept in status.response.headers (CONTRACT).
var selectedHeaders = []string{"Location", "Content-Type", "Idempotent-Replayed", "Retry-After"}

// requestBody returns the RFC 8785 canonical bytes of spec.request.body (nil without a body), refusing bodies
// over MaxRequestBodyBytes.
func requestBody(xa *actionsv1alpha1.ExternalAction) ([]byte, error) {
	b := xa.Spec.Request.Body
	if b == nil || len(b.Raw) == 0 || string(b.Raw) == "null" {
		return nil, nil
	}
	out, err := fingerprint.CanonicalBody(b.Raw)
	if err != nil {
		return nil, err
	}
	if len(out) > MaxRequestBodyBytes {
		return nil, fmt.Errorf("spec.request.body is %d bytes in canonical form; the limit is %d bytes", len(out), MaxRequestBodyBytes)
	}
	return out, nil
}

// repeatSafe: effect Safe or Idempotent (explicit, or from the method per RFC 9110 section 9.2), or the
// destination dedups on the key (CONTRACT).
func repeatSafe(dest *resolvedDestination, xa *actionsv1alpha1.ExternalAction) bool {
	return retry.RepeatSafe(string(dest.Spec.Effect), method(xa), dest.KeySupported)
}

func method(xa *actionsv1alpha1.ExternalAction) string {
	if m := strings.ToUpper(xa.Spec.Request.Method); m != "" {
		return m
	}
	return http.MethodPost
}

// send performs one attempt to target (the checked httpexec.JoinURL of the destination's url and the action's
// path) and classifies it. The request is rebuilt identically from the spec each time.
func (r *ExternalActionReconciler) send(ctx context.Context, xa *actionsv1alpha1.ExternalAction, dest *resolvedDestination,
	target string, body []byte, timeout time.Duration, env ledger.Env) ledger.Outcome {
	h := http.Header{}
	for k, v := range xa.Spec.Request.Headers {
		h.Set(k, string(v))
	}
	if body != nil && h.Get("Content-Type") == "" {
		h.Set("Content-Type", "application/json")
	}
	for k, vs := range dest.AuthHeader {
		h[k] = append([]string(nil), vs...)
	}
	h.Set(dest.KeyHeader, xa.Status.IdempotencyKey)
	red, token, err := r.authorize(ctx, dest, h, body, xa.Status.IdempotencyKey)
	if err != nil {
		// Nothing was sent to the destination: retried within the policy like a refused dial.
		return notSent(r.Clock.Now(), string(authorizeClass(err)), red.String(err.Error())+"; nothing was sent")
	}
	keep := keepBytes(red)
	if xa.Spec.Outputs != nil {
		keep = max(keep, actionsv1alpha1.MaxOutputResponseBytes+red.longest())
	}
	res := r.Executor.Execute(ctx, httpexec.Request{
		Method: method(xa), URL: target, Header: h, Body: body,
		Timeout: timeout, TLS: dest.TLS,
	}, keep)
	r.dropRefusedToken(dest, token, res)
	o := r.classify(xa, res, env, red, token != "")
	if o.Class == retry.ClassSuccess && xa.Spec.Outputs != nil && res.Response != nil {
		// Only a success holds outputs: never a failed, retried or uncertain attempt.
		r.holdOutputs(context.WithoutCancel(ctx), xa, res.Response, red)
	}
	return o
}

// authorize adds what is computed per request to h: the OAuth2 access token (spec.auth.oauth2, from the
// reconciler's token cache) and then the signature (spec.signing, made at the clock's now over body, with the
// idempotency key as the message id), so that each attempt is signed anew. It returns the redactor of this
// request (the destination's Secret values plus the token) and the token sent ("" without oauth2). An error
// means that no token could be obtained and nothing may be sent; its text names no secret.
func (r *ExternalActionReconciler) authorize(ctx context.Context, dest *resolvedDestination, h http.Header, body []byte,
	key string) (*redactor, string, error) {
	red, token := dest.Redactor, ""
	if dest.OAuth2 != nil {
		tokens, err := r.tokens()
		if err != nil {
			return red, "", err
		}
		if token, err = tokens.Token(ctx, dest.ID, *dest.OAuth2); err != nil {
			return red, "", err
		}
		h.Set("Authorization", "Bearer "+token)
		red = red.with(token, "Bearer "+token)
	}
	if dest.Signer != nil {
		if err := dest.Signer.Sign(h, key, body, r.Clock.Now()); err != nil {
			return red, token, &signingError{err: err}
		}
	}
	return red, token, nil
}

// dropRefusedToken drops the cached token that the destination refused with a 401, so that the next request
// fetches a new one.
func (r *ExternalActionReconciler) dropRefusedToken(dest *resolvedDestination, token string, res httpexec.Result) {
	if token == "" || res.Response == nil || res.Response.StatusCode != http.StatusUnauthorized {
		return
	}
	if tokens, err := r.tokens(); err == nil {
		tokens.Invalidate(dest.ID, token)
	}
}

// errNoTokenClient: a destination uses auth.oauth2 but the reconciler has no TokenCache and its executor
// cannot make one.
var errNoTokenClient = errors.New("no OAuth2 token client: the executor provides none (set ExternalActionReconciler.Tokens)")

// tokens returns r.Tokens, made on first use from an executor that offers TokenClient (httpexec.HTTPExecutor).
func (r *ExternalActionReconciler) tokens() (*httpexec.TokenCache, error) {
	r.tokensMu.Lock()
	defer r.tokensMu.Unlock()
	if r.Tokens == nil {
		tc, ok := r.Executor.(interface {
			TokenClient(*httpexec.TLSOptions) (*http.Client, error)
		})
		if !ok {
			return nil, fmt.Errorf("%w: %w", httpexec.ErrTokenUnavailable, errNoTokenClient)
		}
		r.Tokens = httpexec.NewTokenCache(tc.TokenClient)
	}
	return r.Tokens, nil
}

// keepBytes is how much of a response body the executor keeps: the status cap plus the longest Secret value,
// so that a value straddling the cap is seen whole and redacted (redactor.Body).
func keepBytes(red *redactor) int {
	return MaxResponseBodyBytes + red.longest()
}

// classify turns an attempt's result into an outcome. Every destination-supplied string in it (error text,
// Retry-After, the kept response) has the destination's Secret values redacted; the retry decision and
// successWhen see the response as received.
//
// renewed says that the request carried an OAuth2 token, which a 401 has dropped (dropRefusedToken): the 401
// is then retried with a new token.
func (r *ExternalActionReconciler) classify(xa *actionsv1alpha1.ExternalAction, res httpexec.Result, env ledger.Env, red *redactor,
	renewed bool) ledger.Outcome {
	o := ledger.Outcome{FinishedAt: r.Clock.Now()}
	obs := retry.Observation{Err: res.Err, Written: res.Written, RenewedCredential: renewed}
	if res.Err != nil {
		o.ErrorClass = string(res.ErrorClass)
		o.Error = red.String(res.Err.Error())
	}
	if resp := res.Response; resp != nil {
		o.StatusCode = resp.StatusCode
		o.RetryAfter = red.String(resp.Header.Get("Retry-After"))
		o.Response = responseRecord(resp, red)
		obs.StatusCode = resp.StatusCode
		obs.Header = resp.Header
		ok, err := r.succeeded(xa, resp)
		if err != nil {
			o.Error = red.String("spec.successWhen: " + err.Error())
		}
		obs.Succeeded = ok
	}
	o.Class = retry.Classify(obs, env.Policy, env.RepeatSafe, env.KeySupported)
	return o
}

func (r *ExternalActionReconciler) succeeded(xa *actionsv1alpha1.ExternalAction, resp *httpexec.Response) (bool, error) {
	if xa.Spec.SuccessWhen == "" {
		return expr.DefaultSuccess(resp.StatusCode), nil
	}
	p, err := r.successProgram(xa)
	if err != nil {
		return false, err
	}
	return p.Eval(exprResponse(resp))
}

// exprResponse is the response as CEL sees it (successWhen, post-check): as received, not redacted, with the
// body cut at MaxResponseBodyBytes whatever the executor kept beyond it for redaction.
func exprResponse(resp *httpexec.Response) expr.Response {
	body := resp.Body
	if len(body) > MaxResponseBodyBytes {
		body = body[:MaxResponseBodyBytes]
	}
	return expr.Response{StatusCode: resp.StatusCode, Header: resp.Header, Body: body}
}

// responseRecord is the response as status keeps it: Secret values redacted from the body (before it is cut
// to MaxResponseBodyBytes, so a value at the cut leaves nothing behind) and from the selected headers, each
// cut to its bound on a UTF-8 boundary. bodySHA256 stays the hash of the body as the destination sent it.
func responseRecord(resp *httpexec.Response, red *redactor) *actionsv1alpha1.ResponseRecord {
	body, truncated := red.Body(resp.Body, MaxResponseBodyBytes, resp.BodyTruncated)
	rec := &actionsv1alpha1.ResponseRecord{
		StatusCode:    int32(resp.StatusCode), //nolint:gosec // G115: HTTP status codes are three digits
		Body:          body,
		BodyTruncated: truncated,
		BodySHA256:    resp.BodySHA256,
	}
	for _, name := range selectedHeaders {
		if v := resp.Header.Get(name); v != "" {
			if rec.Headers == nil {
				rec.Headers = map[string]string{}
			}
			rec.Headers[name] = cutUTF8(red.String(v), actionsv1alpha1.MaxResponseHeaderValueLength)
		}
	}
	return rec
}

// signingError: spec.signing could not sign the request (authorize); nothing was sent.
type signingError struct{ err error }

func (e *signingError) Error() string { return e.err.Error() }
func (e *signingError) Unwrap() error { return e.err }

// authorizeClass is the errorClass of an authorize failure: SigningFailed for the signature, else
// TokenUnavailable (no OAuth2 access token).
func authorizeClass(err error) httpexec.ErrorClass {
	if _, ok := errors.AsType[*signingError](err); ok {
		return httpexec.ClassSigningFailed
	}
	return httpexec.ClassTokenUnavailable
}
