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
local valid, failed, succeeded = conditions["SpecValid"], conditions["Failed"], conditions["Succeeded"]
if valid ~= nil and valid.status == "False" then
  hs.status = "Degraded"
  hs.message = says(valid, "The spec breaks a vLLM rule")
  return hs
end
if failed ~= nil and failed.status == "True" then
  hs.status = "Degraded"
  hs.message = says(failed, "Failed")
  return hs
end
if succeeded ~= nil and succeeded.status == "True" then
  hs.status = "Healthy"
  hs.message = says(succeeded, "Succeeded")
  return hs
end
hs.status = "Progressing"
hs.message = says(conditions["Progressing"], "Waiting for the shards")
return hs
