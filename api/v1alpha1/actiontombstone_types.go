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

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// ActionTombstoneSpec is what outlives a collected or deleted ExternalAction: enough to replay its outcome and to refuse a different payload under the same key, and nothing more.
type ActionTombstoneSpec struct {
	// key is the idempotency key (namespace/name of the action).
	// +kubebuilder:validation:MaxLength=512
	Key string `json:"key"`
	// fingerprint is the action's fingerprint.
	// +kubebuilder:validation:MaxLength=80
	Fingerprint string `json:"fingerprint"`
	// phase is the action's phase when its object was deleted.
	Phase Phase `json:"phase"`
	// statusCode is the recorded response code, if any.
	// +optional
	StatusCode int32 `json:"statusCode,omitempty"`
	// response is the recorded response as status.response held it when the object went: status code, the kept headers and the body, already redacted and capped at 4096 bytes (bodyTruncated and bodySHA256 say whether it is whole). A re-created action with the same key and fingerprint gets it back in its status.response, and the gateway answers a repeat with it. Absent for an action that went without a response.
	// +optional
	Response *ResponseRecord `json:"response,omitempty"`
	// completedAt is when the action finished, if it did.
	// +optional
	CompletedAt *metav1.Time `json:"completedAt,omitempty"`
	// uid is the UID of the object this tombstone stands for.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	UID string `json:"uid,omitempty"`
	// expiresAt is the end of the replay horizon: the destination's retention.tombstoneTTL after the object was deleted. Then the tombstone is deleted, and the same name is a new action.
	ExpiresAt metav1.Time `json:"expiresAt"`
}

// +kubebuilder:object:root=true
// +kubebuilder:resource:shortName=xat,categories=actionledger
// +kubebuilder:printcolumn:name="PHASE",type=string,JSONPath=`.spec.phase`
// +kubebuilder:printcolumn:name="CODE",type=integer,JSONPath=`.spec.statusCode`
// EXPIRES is a string column: kubectl prints a future time in a date column as <invalid>.
// +kubebuilder:printcolumn:name="EXPIRES",type=string,JSONPath=`.spec.expiresAt`,description="When the tombstone is removed"

// ActionTombstone is the controller's record of a finished ExternalAction whose object is gone. Its name is the action's name, in the action's namespace. It is written by the controller; do not edit it.
type ActionTombstone struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is the tombstone's content.
	// +required
	Spec ActionTombstoneSpec `json:"spec"`
}

// +kubebuilder:object:root=true

// ActionTombstoneList contains a list of ActionTombstone.
type ActionTombstoneList struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ActionTombstone `json:"items"`
}

func init() {
	SchemeBuilder.Register(func(s *runtime.Scheme) error {
		s.AddKnownTypes(SchemeGroupVersion, &ActionTombstone{}, &ActionTombstoneList{})
		return nil
	})
}
