-- Argo CD health of a vllm-pooling.io service (PoolingService and ScoringService share this script).
-- Healthy when Ready; Degraded when the spec breaks a vLLM rule (SpecValid=False) or the workload is
-- Degraded; Progressing before the operator observed this generation, while rolling out or loading.
-- Uses only base Lua (argocd-cm scripts get no string/math libraries by default).
local hs = {}
local generation = obj.metadata.generation
if obj.status == nil or obj.status.observedGeneration == nil then
  hs.status = "Progressing"
  hs.message = "Waiting for the operator to observe the resource"
  return hs
end
if generation ~= nil and obj.status.observedGeneration < generation then
  hs.status = "Progressing"
  hs.message = "Waiting for the operator to observe generation " .. generation
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
if conditions["Degraded"] ~= nil and conditions["Degraded"].status == "True" then
  hs.status = "Degraded"
  hs.message = says(conditions["Degraded"], "Degraded")
  return hs
end
if conditions["Ready"] ~= nil and conditions["Ready"].status == "True" then
  hs.status = "Healthy"
  hs.message = says(conditions["Ready"], "Ready")
  return hs
end
if conditions["Ready"] ~= nil and conditions["Ready"].reason == "ScaledToZero" then
  hs.status = "Healthy"
  hs.message = says(conditions["Ready"], "Scaled to zero")
  return hs
end
hs.status = "Progressing"
hs.message = says(conditions["Ready"], "Waiting for the replicas to become Ready")
return hs
