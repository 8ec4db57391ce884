-- wrk script of scripts/bench: POSTs the ingest's batches of five events with
-- `X-public-key`, as the SDK's fetch sends them. The batches come from a file written by
-- `loadgen wrk-batches` (the traffic model of `loadgen ingest`, beacons left out), one a
-- line: key, user agent and JSON body, separated by tabs. Every request is formatted once,
-- in init, so that wrk's own work per request is only sending it. PATH (default
-- /api/v1/analytics) posts them elsewhere: PostHog capture's /batch/ takes the same batches
-- written with `loadgen wrk-batches --format posthog`.
--   wrk -s loadgen/wrk/ingest.lua URL -- BATCHES_FILE [PATH]
local requests = {}
local next_request = 1
local threads = 0

-- Runs in wrk's main state, once per thread: each thread starts at another batch.
function setup(thread)
  thread:set("offset", threads * 7919)
  threads = threads + 1
end

function init(args)
  local file = args[1]
  if file == nil then
    error("usage: wrk -s ingest.lua URL -- BATCHES_FILE [PATH]")
  end
  local path = args[2] or "/api/v1/analytics"
  for line in io.lines(file) do
    local key, agent, body = line:match("^([^\t]+)\t([^\t]+)\t(.+)$")
    if key ~= nil then
      requests[#requests + 1] = wrk.format("POST", path, {
        ["Content-Type"] = "application/json",
        ["Accept"] = "application/json",
        ["X-public-key"] = key,
        ["User-Agent"] = agent,
      }, body)
    end
  end
  if #requests == 0 then
    error("no batch in " .. file)
  end
  next_request = (offset or 0) % #requests + 1
end

function request()
  local r = requests[next_request]
  next_request = next_request % #requests + 1
  return r
end
