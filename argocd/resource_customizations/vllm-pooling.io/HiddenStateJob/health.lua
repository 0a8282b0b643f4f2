-- Argo CD health of a vllm-pooling.io HiddenStateJob: Healthy only when Succeeded, Degraded when Failed or
-- when the spec breaks a vLLM rule (SpecValid=False), Progressing otherwise (shards running, or not yet
-- observed). Uses only base Lua (argocd-cm scripts get no string/math libraries by default).
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
hs.status = "Progressing"
hs.message = says(conditions["Progressing"], "Waiting for the shards")
return hs
