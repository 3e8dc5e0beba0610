
(function(){
"use strict";
var root=document.getElementById("dt-report");
var PAL=JSON.parse(root.getAttribute("data-palettes"));
function rgb(h){return [parseInt(h.substr(0,2),16),parseInt(h.substr(2,2),16),parseInt(h.substr(4,2),16)];}
var P={sim:PAL.sim.map(rgb),diff:PAL.diff.map(rgb),sub:PAL.sub.map(rgb)};
function bytes(s){var b=atob(s),a=new Uint8Array(b.length);for(var i=0;i<b.length;i++)a[i]=b.charCodeAt(i);return a;}
function draw(cv){
  if(cv.getAttribute("data-drawn"))return;
  var hm=cv.closest(".hm"),g=+hm.getAttribute("data-rows"),h=+hm.getAttribute("data-cols");
  var v=bytes(hm.getAttribute("data-values")),p=P[hm.getAttribute("data-kind")];
  var ctx=cv.getContext("2d"),img=ctx.createImageData(h,g),d=img.data;
  for(var i=0;i<g*h;i++){var c=p[v[i]];d[4*i]=c[0];d[4*i+1]=c[1];d[4*i+2]=c[2];d[4*i+3]=255;}
  ctx.putImageData(img,0,0);cv.setAttribute("data-drawn","1");
}
Array.prototype.forEach.call(document.querySelectorAll("canvas.hm-canvas"),draw);
var tip=document.getElementById("dt-tip");
Array.prototype.forEach.call(document.querySelectorAll(".hm-plot"),function(el){
  var hm=el.closest(".hm"),vals=null,labels=null;
  el.addEventListener("mousemove",function(e){
    if(!vals){vals=bytes(hm.getAttribute("data-values"));labels=JSON.parse(hm.getAttribute("data-labels"));}
    var r=el.getBoundingClientRect(),g=+hm.getAttribute("data-rows");
    var i=Math.floor((e.clientY-r.top)/r.height*g),j=Math.floor((e.clientX-r.left)/r.width*g);
    if(i<0||j<0||i>=g||j>=g){tip.style.display="none";return;}
    var q=vals[i*g+j],kind=hm.getAttribute("data-kind"),vmax=+hm.getAttribute("data-vmax");
    var frac=kind==="sim"||kind==="sub",val=frac?q/255:(q===0?0:q/255*vmax);
    var exact=q===0||(q===255&&frac);
    var sym=kind==="sim"?"J":kind==="sub"?"S":"JSM_D";
    tip.textContent=labels[i]+" \u00d7 "+labels[j]+": "+sym+(exact?" = ":" \u2248 ")+val.toFixed(3);
    tip.style.left=(e.clientX+12)+"px";tip.style.top=(e.clientY+12)+"px";tip.style.display="block";
  });
  el.addEventListener("mouseleave",function(){tip.style.display="none";});
});
Array.prototype.forEach.call(document.querySelectorAll("select.thread-select"),function(s){
  s.addEventListener("change",function(){   // one thread index alone, or all of them grouped
    Array.prototype.forEach.call(s.closest(".set").querySelectorAll(".hm-view"),function(v){
      v.hidden=v.getAttribute("data-thread")!==s.value;});
  });
});
var table=document.getElementById("ranking");
if(!table){root.setAttribute("data-js","ready");return;}   // no ranking rows: nothing to select
var tbody=table.tBodies[0],sel=document.getElementById("row-select");
var level="thread";
function show(comp,key){
  var box=document.getElementById(comp);if(!box)return;var found=false;
  Array.prototype.forEach.call(box.children,function(c){
    if(!c.hasAttribute("data-key"))return;
    var on=c.getAttribute("data-key")===key;c.hidden=!on;if(on)found=true;});
  var m=box.querySelector(".missing");if(m)m.hidden=found;
}
function select(n){
  var tr=tbody.querySelector('tr[data-row="'+n+'"]');if(!tr)return;
  Array.prototype.forEach.call(tbody.rows,function(r){r.classList.toggle("selected",r===tr);});
  if(sel)sel.value=String(n);
  var hk=tr.getAttribute("data-hm-key");
  show("heatmaps",hk+"|"+level);show("dendrograms",tr.getAttribute("data-dn-key"));show("lattices",hk);
  var cur=document.getElementById("current");if(cur)cur.textContent="row "+n+": "+tr.getAttribute("data-title");
  root.setAttribute("data-selected",String(n));
}
function sortBy(col,dir){
  var th=table.tHead.rows[0].cells[col],num=th.getAttribute("data-type")==="num";
  var rows=Array.prototype.slice.call(tbody.rows);
  rows.sort(function(a,b){
    var x=a.cells[col].getAttribute("data-sort")||a.cells[col].textContent;
    var y=b.cells[col].getAttribute("data-sort")||b.cells[col].textContent;
    var c=num?(parseFloat(x)-parseFloat(y)):x.localeCompare(y);
    return dir*c||(+a.getAttribute("data-row"))-(+b.getAttribute("data-row"));});
  rows.forEach(function(r){tbody.appendChild(r);});
  Array.prototype.forEach.call(table.tHead.rows[0].cells,function(h,k){
    if(k===col)h.setAttribute("aria-sort",dir>0?"ascending":"descending");else h.removeAttribute("aria-sort");});
  table.setAttribute("data-sorted",th.getAttribute("data-col")+":"+(dir>0?"asc":"desc"));
}
Array.prototype.forEach.call(table.tHead.rows[0].cells,function(th,col){
  th.addEventListener("click",function(){sortBy(col,th.getAttribute("aria-sort")==="ascending"?-1:1);});});
tbody.addEventListener("click",function(e){var tr=e.target.closest("tr");if(tr)select(+tr.getAttribute("data-row"));});
if(sel)sel.addEventListener("change",function(){select(+sel.value);});
Array.prototype.forEach.call(document.querySelectorAll('input[name="level"]'),function(r){
  r.addEventListener("change",function(){level=r.value;select(+root.getAttribute("data-selected"));});});
var h=location.hash.replace(/^#/,"").split("&"),start=1;
h.forEach(function(p){var kv=p.split("=");
  if(kv[0]==="row"&&+kv[1]>0)start=+kv[1];
  if(kv[0]==="sort"){var s=(kv[1]||"").split(":");
    Array.prototype.forEach.call(table.tHead.rows[0].cells,function(th,col){
      if(th.getAttribute("data-col")===s[0])sortBy(col,s[1]==="desc"?-1:1);});}
});
if(tbody.rows.length)select(start);
root.setAttribute("data-js","ready");
})();
