# cmake -DLIBRARY=libmemcg_http.so -P shared_holds_no_core.cmake: fails when the shared object
# defines a symbol of the core library (it must take them from libmemcg.so), or when it does
# not use libmemcg.so at all.
find_program(NM nm REQUIRED)
execute_process(COMMAND ${NM} -DC --defined-only ${LIBRARY} OUTPUT_VARIABLE defined
                RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "nm failed on ${LIBRARY}")
endif()
foreach(core_symbol "memcg::Controller::Controller" "memcg::Group::" "memcg::EventBus::publish"
                    "memcg_controller_create")
  string(FIND "${defined}" "${core_symbol}" at)
  if(NOT at EQUAL -1)
    message(FATAL_ERROR "${LIBRARY} defines ${core_symbol}: it holds a copy of the core")
  endif()
endforeach()
string(FIND "${defined}" "memcg_server_start" at)
if(at EQUAL -1)
  message(FATAL_ERROR "${LIBRARY} does not define memcg_server_start")
endif()
execute_process(COMMAND ${NM} -DC --undefined-only ${LIBRARY} OUTPUT_VARIABLE undefined)
string(FIND "${undefined}" "memcg::Controller::" at)
if(at EQUAL -1)
  message(FATAL_ERROR "${LIBRARY} takes nothing of the Controller from libmemcg.so")
endif()
message(STATUS "${LIBRARY}: the core comes from libmemcg.so")
