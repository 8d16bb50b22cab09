/* gloo: ranks out of step are named within 2 s, a late rank is not
 * (t/comm/desync-cases.h). */
#include "t/comm/desync-cases.h"

int main(void)
{
    if (!h_have("gloo")) {
        printf("1..0 # SKIP the gloo plugin is not built here\n");
        return 0;
    }
    d_run_all("gloo");
    return done_testing();
}
