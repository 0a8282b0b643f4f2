"""The messages of rules that both the API server (CEL in the CRDs) and Python validation (`validate`, the
reconcile) enforce: one definition each, so `kubectl apply` and `pooling-operator validate` say the same thing.
Python may add specifics after the shared text (which id repeats, the sorted order); tests/test_cel_messages.py
checks that every CEL rule of crds/ has a Python rule whose message contains its message."""

from __future__ import annotations

NAME_DNS1035 = (
    "must be a DNS-1035 label of at most 63 characters (lowercase letters, digits and '-', starting with a "
    "letter and ending with a letter or digit), because a Service carries the name"
)
SOURCE_EXACTLY_ONE = "exactly one of huggingFace, volume or cache must be set"
CACHE_STORAGE_EXACTLY_ONE = "exactly one of claimName or size must be set"
ENV_SOURCE_EXACTLY_ONE = "exactly one of secretKeyRef, configMapKeyRef, fieldRef or resourceFieldRef must be set"
MIN_LE_MAX_REPLICAS = "minReplicas must be less than or equal to maxReplicas"
MIN_REPLICAS_ZERO = (
    "minReplicas 0 needs a wake signal that exists while no pod runs: vLLM's metrics vanish with the last pod, so "
    "once at zero the service could never wake (for either backend: the ScaledObject is the operator's, so no "
    "trigger added to it by hand is kept); set autoscaling.wake.prometheus.query (demand for this service, e.g. "
    "its requests at an ingress) or autoscaling.front.kedaHttpAddOn (the add-on holds requests and its pending "
    "count wakes the service), or use minReplicas >= 1"
)
SCALE_TO_ZERO_NEEDS_MIN_ZERO = "scaleToZero applies only with minReplicas 0 (and a wake signal)"
POOLING_TYPE_FOR_TASK = (
    "pooling.type must be CLS, MEAN or LAST for the sequence tasks embed and classify, ALL or STEP for the token "
    "tasks token_embed and token_classify"
)
MATRYOSHKA_DIMENSIONS = (
    "pooling.dimensions must be one of model.matryoshkaDimensions (declare the model's Matryoshka sizes there first)"
)
DIMENSIONS_EMBEDDING_ONLY = "pooling.dimensions applies only to the embedding tasks embed and token_embed"
EMBEDDING_SPACE = (
    "model.name, model.revision, pooling.type, pooling.normalize, pooling.dimensions and the vectors' query and "
    "document instructions define the vector space; change embeddingSpace to a new label in the same update to "
    "change them"
)
SCORING_VECTORS_INPUTS_ONLY = (
    "scoring returns scores: a ScoringService, or a PoolingJob with mode, declares only vectors.inputs (outputs, "
    "instructions and ioProcessorPlugin are for the pooling tasks)"
)
LABELS_DISTINCT = "label token ids must be distinct"
GENERATIVE_IFF_MODE = "generative must be set exactly when mode is generative"
POOLING_BIENCODER_ONLY = "pooling applies only to mode biEncoder"
BIENCODER_SEQUENCE_POOLING = "a biEncoder embeds whole sequences: pooling.type must be CLS, MEAN or LAST"
JOB_IMMUTABLE = "spec is immutable: create a new HiddenStateJob instead"
POOLING_JOB_IMMUTABLE = "spec is immutable: create a new PoolingJob instead"
PARALLELISM_LE_SHARDS = "parallelism must be less than or equal to shards"
BATCH_FILE_EMBED_ONLY = (
    "an OpenAI Batch file (dataset.format or output.formats openaiBatch) is for task embed (/v1/embeddings lines) "
    "or a scoring mode (/v1/rerank and /v1/score lines); use format jsonl and safetensors for classify, "
    "token_embed and token_classify"
)
JOB_TASK_OR_MODE = (
    "set exactly one of task (embed, classify, token_embed or token_classify: pool each input) or mode "
    "(crossEncoder, biEncoder, lateInteraction or generative: score (query, documents) groups)"
)
SCORING_JOB_NO_SPACE = (
    "embeddingSpace labels vectors; a scoring job (mode) writes scores: remove embeddingSpace or set task instead"
)
SPACE_CHECK_NEEDS_SPACE = (
    "spaceCheck guards an embedding space, whose reference is kept per label: set embeddingSpace, or remove spaceCheck"
)
SCORING_JOB_CONVERT = "convert applies to a pooling task; a scoring job's mode chooses the model's adaptation: remove convert"
GENERATIVE_BATCH_FILE = (
    "mode generative reads our JSONL groups ({\"id\", \"query\", \"documents\"}): vLLM's /generative_scoring has "
    "no OpenAI Batch url; use dataset.format jsonl and output.formats [safetensors]"
)
BATCH_OUTPUT_NEEDS_BATCH_INPUT = (
    "output.formats openaiBatch answers an OpenAI Batch input file: set dataset.format openaiBatch, or use "
    "formats [safetensors]"
)
BUDGET_NEEDS_HIDDEN_SIZE = "output.storageBudget needs model.hints.hiddenSize to estimate file sizes"
LAYERS_ASCENDING = "layers must be in ascending order"
ALLOWED_BACKENDS_NONEMPTY = "allowedBackends must name at least one backend"
SHARE_NOT_COUNT = "resources.gpu.share replaces whole GPUs: remove resources.gpu.count (or the share)"
SHARE_NOT_RESOURCE_NAME = (
    "resources.gpu.share replaces resources.gpu.resourceName: name a time-sliced resource in share.resourceName"
)
SHARE_MIG_PROFILE = "share.via mig needs share.migProfile (e.g. 1g.10gb)"
SHARE_DRA_CLASS = "share.via dra needs share.deviceClassName (e.g. gpu.nvidia.com)"
SHARE_RESOURCE_NAME_TIME_SLICING = "share.resourceName applies only to via timeSlicing"
SHARE_MIG_PROFILE_ONLY = "share.migProfile applies only to via mig"
SHARE_DRA_CLASS_ONLY = "share.deviceClassName applies only to via dra"
ROUTER_NO_API_KEY = (
    "routing.vllmRouter cannot sit in front of service.apiKeySecretRef: vllm-router checks no client API key and "
    "forwards no client Authorization header, so behind it the key would either guard nothing (were it given to "
    "the router) or refuse every request on /v1 and /v2; remove service.apiKeySecretRef and restrict clients with "
    "networkPolicy, or remove routing"
)
