// The KServe v2 REST routes (kserve-v2-protocol.md §9) and kiln's graph API as protobuf JSON
// (POST /v1/graphs:execute), calling server/core directly:
//
//   GET  /v2, /v2/health/{live,ready}, /v2/models/{m}[/versions/{v}][/ready|/config|/stats],
//        /v2/models/stats
//   POST /v2/models/{m}[/versions/{v}]/infer (JSON, or the binary tensor data extension),
//        /v2/repository/index, /v2/repository/models/{m}/{load,unload}, /v1/graphs:execute
//   Triton's system shared memory: GET /v2/systemsharedmemory[/region/{r}]/status,
//        POST /v2/systemsharedmemory/region/{r}/register, POST /v2/systemsharedmemory[/region/{r}]/unregister
//   Triton's logging: GET (read) and POST (update) /v2/logging
//   Triton's trace: GET (read) and POST (update) /v2[/models/{m}]/trace/setting
//
// HEAD is GET without the body; other methods on a known path are 405 naming what to use.
// Plan routes from the head alone (no core call); the handler it returns runs on a worker
// thread. Thread-safe.
#pragma once

#include "server/core/auth.h"
#include "server/core/inference_server.h"
#include "server/rest/http_message.h"
#include "server/rest/http_util.h"

namespace kiln::server {

class KserveRoutes {
 public:
  // `core` (and `auth`, when given) must outlive this object. `auth` checks request parameters
  // that need more than their call's role (auth.h: infer's parameters.kiln_viz); null: none.
  KserveRoutes(InferenceServer* core, BodyLimits limits, const Authenticator* auth = nullptr)
      : core_(core), limits_(limits), auth_(auth) {}
  RoutePlan Plan(const HttpRequest& req) const;
  // The path's row in the endpoint table (server/core/auth.h), "GET /v2/models/{m}/ready"...;
  // "" for a path no route serves (answered 404 by Plan).
  static std::string_view EndpointName(std::string_view path);

 private:
  InferenceServer* const core_;
  const BodyLimits limits_;
  const Authenticator* const auth_;
};

}  // namespace kiln::server
