-- Argo CD health check for actions.actionledger.dev/ExternalAction (docs/gitops.md).
--   Succeeded                       -> Healthy; with spec.outputs: Progressing while they are written
--                                      (Ready=False), Degraded when they cannot be (Stalled=True:
--                                      OutputMissing, OutputConflict, OutputLost, ...)
--   Pending, InProgress (retrying)  -> Progressing
--   Pending, InProgress with Stalled=True (the destination is missing or unusable) -> Degraded; it resumes
--                                      by itself once the destination is fixed
--                                      (also behind an OutcomeUnknown holder of its spec.subject)
--   Failed, Exhausted, Conflict     -> Degraded
--   OutcomeUnknown                  -> Degraded: a send may have been applied and only a person can decide
--                                      (annotation actions.actionledger.dev/resolve); Degraded, not Suspended,
--                                      so that Argo CD's health notifications fire and a sync wave waiting on the
--                                      action does not look merely paused. kstatus and Flux read it as Failed too.
-- No status yet, or a status older than the spec (observedGeneration < generation) -> Progressing.
local hs = {}
hs.status = "Progressing"
hs.message = "Waiting for the controller to record the action"

if obj.status == nil or obj.status.phase == nil or obj.status.phase == "" then
  return hs
end

local generation = 0
if obj.metadata ~= nil and obj.metadata.generation ~= nil then
  generation = obj.metadata.generation
end
local observed = obj.status.observedGeneration or 0
if observed < generation then
  hs.message = "Waiting for the controller to observe generation " .. tostring(generation)
  return hs
end

local function condition(t)
  if obj.status.conditions == nil then
    return nil
  end
  for _, c in ipairs(obj.status.conditions) do
    if c.type == t then
      return c
    end
  end
  return nil
end

local function message(default)
  local c = condition("Ready")
  if c ~= nil and c.message ~= nil and c.message ~= "" then
    return c.message
  end
  return default
end

local phase = obj.status.phase
local code = ""
if obj.status.response ~= nil and obj.status.response.statusCode ~= nil then
  code = " (HTTP " .. tostring(obj.status.response.statusCode) .. ")"
end

if phase == "Succeeded" then
  local ready = condition("Ready")
  local stalled = condition("Stalled")
  if stalled ~= nil and stalled.status == "True" then
    hs.status = "Degraded"
    hs.message = "Succeeded" .. code .. " (not ready, " .. tostring(stalled.reason) .. "): " .. (stalled.message or "")
  elseif ready ~= nil and ready.status == "False" then
    hs.status = "Progressing"
    hs.message = "Succeeded" .. code .. ": " .. message("writing the outputs")
  else
    hs.status = "Healthy"
    hs.message = "Succeeded" .. code
  end
elseif phase == "Pending" or phase == "InProgress" then
  local stalled = condition("Stalled")
  if stalled ~= nil and stalled.status == "True" then
    hs.status = "Degraded"
    hs.message = phase .. " (stalled, " .. tostring(stalled.reason) .. "): " .. (stalled.message or "")
  else
    hs.status = "Progressing"
    hs.message = phase .. ": " .. message("attempt " .. tostring(obj.status.attempts or 0))
  end
elseif phase == "OutcomeUnknown" then
  hs.status = "Degraded"
  hs.message = "OutcomeUnknown: the destination may have applied the request; decide with the annotation " ..
    "actions.actionledger.dev/resolve=applied|not-applied|retry. " .. message("")
elseif phase == "Failed" or phase == "Exhausted" or phase == "Conflict" then
  hs.status = "Degraded"
  hs.message = phase .. code .. ": " .. message(obj.status.lastError or "")
else
  hs.status = "Unknown"
  hs.message = "Unrecognized phase " .. tostring(phase)
end
return hs
