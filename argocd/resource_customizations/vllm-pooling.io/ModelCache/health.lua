-- Argo CD health of a vllm-pooling.io ModelCache: Degraded when the fill failed (Failed=True: its reason
-- and message) or the spec breaks a rule (SpecValid=False), Healthy when Ready (a verified snapshot is
-- in place), Progressing while it fills or before the operator observed this generation.
-- Uses only base Lua (argocd-cm scripts get no string/math libraries by default).
local hs = {}
local generation = obj.metadata.generation
if obj.status == nil or obj.status.observedGeneration == nil then
  hs.status = "Progressing"
  hs.message = "Waiting for the operator to observe the cache"
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
if conditions["Failed"] ~= nil and conditions["Failed"].status == "True" then
  hs.status = "Degraded"
  hs.message = says(conditions["Failed"], "Failed")
  return hs
end
if conditions["Ready"] ~= nil and conditions["Ready"].status == "True" then
  hs.status = "Healthy"
  hs.message = says(conditions["Ready"], "Ready")
  return hs
end
hs.status = "Progressing"
hs.message = says(conditions["Progressing"], "Filling")
return hs
