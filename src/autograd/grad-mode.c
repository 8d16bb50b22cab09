/* Grad mode and recording suspension, per thread. */
#include "config.h"
#include "src/autograd/node-impl.h"

static _Thread_local bool grad_off; /* zero-initialised: grad mode on */
static _Thread_local int suspended; /* inside a hand-written module's forward */

bool phx_grad_enabled(void)
{
    return !grad_off;
}

bool phx_set_grad_enabled(bool on)
{
    bool prev = !grad_off;
    grad_off = !on;
    return prev;
}

bool px_recording(void)
{
    return !grad_off && !suspended;
}

int px_recording_suspend(void)
{
    int prev = suspended;
    suspended = 1;
    return prev;
}

int px_recording_resume(void)
{
    int prev = suspended;
    suspended = 0;
    return prev;
}

void px_recording_restore(int prev)
{
    suspended = prev;
}

bool px_recording_suspended(void)
{
    return suspended != 0;
}
