package send

import (
	actionsv1alpha1 "github.com/actionledger/actionledger/api/v1alpha1"
	"github.com/actionledger/actionledger/internal/httpexec"
	"github.com/actionledger/actionledger/internal/ledger"
	"github.com/actionledger/actionledger/internal/redact"
)

// seam gives the tests the send path's readers of a response, as the send path calls them.
type seam struct {
	successWhen func(s *Sender, xa *actionsv1alpha1.ExternalAction, resp *httpexec.Response, red *redact.Redactor) (bool, error)
	classify    func(s *Sender, xa *actionsv1alpha1.ExternalAction, res httpexec.Result, env ledger.Env, red *redact.Redactor) ledger.Outcome
}

var theSeam = seam{
	successWhen: func(s *Sender, xa *actionsv1alpha1.ExternalAction, resp *httpexec.Response, red *redact.Redactor) (bool, error) {
		return SuccessWhen(s.Exprs, xa, red.View(resp))
	},
	classify: func(s *Sender, xa *actionsv1alpha1.ExternalAction, res httpexec.Result, env ledger.Env, red *redact.Redactor) ledger.Outcome {
		r := request{kind: kindAttempt, xa: xa, env: env,
			success: func(view *redact.View) (bool, error) { return SuccessWhen(s.Exprs, xa, view) }}
		return s.classify(r, exchanged{res: res, red: red}, red.View(res.Response))
	},
}
