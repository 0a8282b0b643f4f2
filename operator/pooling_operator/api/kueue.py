"""Kueue's side of the contract, in one place: the labels and annotation a Job carries to be admitted, and the
Workload conditions the operator reads back. Kueue v0.17.0 (sigs.k8s.io/kueue), cited by file.

The operator creates the Job suspended with these labels, Kueue creates a Workload for it (owned by the Job),
admits it by unsuspending the Job (setting `parallelism` to what fits with partial admission), and may
suspend it again to preempt it. The Workload says why the Job waits.
"""

from __future__ import annotations

API_VERSION = "kueue.x-k8s.io/v1beta2"  # the storage version of Workload and LocalQueue in v0.17 (v1beta1 still served)

# pkg/controller/constants/constants.go
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"
JOB_UID_LABEL = "kueue.x-k8s.io/job-uid"  # on the Workload: the uid of the Job it stands for
# pkg/controller/jobs/job/job_controller.go (JobMinParallelismAnnotation): partial admission down to this many pods
MIN_PARALLELISM_ANNOTATION = "kueue.x-k8s.io/job-min-parallelism"

# apis/kueue/v1beta2/workload_types.go: Workload condition types and the reasons read here
QUOTA_RESERVED = "QuotaReserved"
ADMITTED = "Admitted"
EVICTED = "Evicted"
PREEMPTED = "Preempted"  # the condition type, and Evicted's reason when evicted by preemption (WorkloadEvictedByPreemption)
