package controller_test

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/recorder"
)

func durationp(d time.Duration) *metav1.Duration { return &metav1.Duration{Duration: d} }

// fakeEventRecorder returns a recorder that drops events (the stale-cache test asserts on requests).
func fakeEventRecorder() recorder.EventRecorder {
	return annotated{events.NewFakeRecorder(100)}
}

type annotated struct{ *events.FakeRecorder }
