-- Argo CD health of a vllm-pooling.io job (HiddenStateJob and PoolingJob share this script): Healthy only
-- when Succeeded, Degraded when Failed, when the spec breaks a vLLM rule (SpecValid=False) or nothing can
-- admit it (Kueue not installed, no such LocalQueue), Suspended while Kueue holds it (Queued=True),
-- Progressing otherwise (shards running, or not yet observed).
-- Uses only base Lua (argocd-cm scripts get no string/math libraries by default).
local hs = {}
if obj.status == nil or obj.status.observedGeneration == nil then
  hs.status = "Progressing"
  hs.message = "Waiting for the operator to observe the job"
  return hs
end
local conditions = {}
if obj.status.conditions ~= nil then
  for _, c in ipairs(obj.status.conditions) do
    conditions[c.type] = c
  end
end
local function says(c, fallback)
  if c ~= nil and c.message ~= nil and c.message ~= "" then
    return c.message
  end
  if c ~= nil and c.reason ~= nil then
    return c.reason
  end
  return fallback
end
if conditions["SpecValid"] ~= nil and conditions["SpecValid"].status == "False" then
  hs.status = "Degraded"
  hs.message = says(conditions["SpecValid"], "The spec breaks a vLLM rule")
  return hs
end
if conditions["Failed"] ~= nil and conditions["Failed"].status == "True" then
  hs.status = "Degraded"
  hs.message = says(conditions["Failed"], "Failed")
  return hs
end
if conditions["Succeeded"] ~= nil and conditions["Succeeded"].status == "True" then
  hs.status = "Healthy"
  hs.message = says(conditions["Succeeded"], "Succeeded")
  return hs
end
if conditions["Queued"] ~= nil and conditions["Queued"].reason == "KueueNotInstalled" then
  hs.status = "Degraded"
  hs.message = says(conditions["Queued"], "Kueue is not installed")
  return hs
end
if conditions["Queued"] ~= nil and conditions["Queued"].reason == "LocalQueueNotFound" then
  hs.status = "Degraded"
  hs.message = says(conditions["Queued"], "The LocalQueue does not exist")
  return hs
end
if conditions["Queued"] ~= nil and conditions["Queued"].status == "True" then
  hs.status = "Suspended"
  hs.message = says(conditions["Queued"], "Waiting for Kueue to admit the job")
  return hs
end
hs.status = "Progressing"
hs.message = says(conditions["Progressing"], "Waiting for the shards")
return hs
