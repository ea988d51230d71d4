/* An installed memcg's C API from a C11 program built with `pkg-config memcg-c`. */
#include <memcg/c/memcg.h>
#include <stdio.h>

int main(void) {
  if (!MEMCG_C_VERSION_COMPATIBLE()) return 1;
  memcg_controller* c = NULL;
  memcg_group* g = NULL;
  if (memcg_controller_create(NULL, &c) != 0 || memcg_group_create(c, "a", &g) != 0) return 1;
  if (memcg_charge(g, 4096, MEMCG_CHARGE_DEFAULT) != MEMCG_CHARGE_OK) return 1;
  memcg_uncharge(g, 4096);
  memcg_group_release(g);
  if (memcg_controller_destroy(c) != 0) return 1;
  printf("consumer (C): memcg %s\n", memcg_version_string());
  return 0;
}
