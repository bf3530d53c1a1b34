package outputs

import (
	"context"

	actionsv1alpha1 "github.com/actionledger/actionledger/api/v1alpha1"
	"github.com/actionledger/actionledger/internal/expr"
	"github.com/actionledger/actionledger/internal/httpexec"
	"github.com/actionledger/actionledger/internal/redact"
	"github.com/actionledger/actionledger/internal/send"
)

// readers are the three readers of one response the redaction tests check: status (the ResponseRecord), an
// output (Hold) and successWhen, each given the response as the send path gives it to them.
type readers struct {
	record      func(resp *httpexec.Response, red *redact.Redactor) *actionsv1alpha1.ResponseRecord
	hold        func(mgr *Manager, xa *actionsv1alpha1.ExternalAction, resp *httpexec.Response, red *redact.Redactor)
	successWhen func(exprs *expr.Cache, xa *actionsv1alpha1.ExternalAction, resp *httpexec.Response, red *redact.Redactor) (bool, error)
}

// theReaders take the response from its one redacted view, made once (as the send path does).
var theReaders = readers{
	record: func(resp *httpexec.Response, red *redact.Redactor) *actionsv1alpha1.ResponseRecord {
		return send.ResponseRecord(red.View(resp))
	},
	hold: func(mgr *Manager, xa *actionsv1alpha1.ExternalAction, resp *httpexec.Response, red *redact.Redactor) {
		mgr.Hold(context.Background(), xa, red.View(resp))
	},
	successWhen: func(exprs *expr.Cache, xa *actionsv1alpha1.ExternalAction, resp *httpexec.Response, red *redact.Redactor) (bool, error) {
		return send.SuccessWhen(exprs, xa, red.View(resp))
	},
}
